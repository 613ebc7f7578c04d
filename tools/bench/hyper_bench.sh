#!/usr/bin/env bash
# CPU training step of Hyper-Connections against Pre-Norm (docs/performance-cpu.md,
# "Hyper-Connections"), in normlab and in the plain PyTorch peer: configs/small/lm.yaml as
# pre_norm, configs/small/hyper_dhc2.yaml (2xDHC) and the same with model.hyper.n=4 (4xDHC), each
# in `normlab train` and in tools/bench/torch_train.py (its connections are those of the
# independent reference, tests/reference/hyper_ref.py), one after the other, REPEATS times, each
# run timing STEPS steps after WARMUP untimed ones. The peer reads the config as `normlab config`
# resolves it, so it trains the same model, batch and optimizer; the script checks that both
# count the same parameters (it stops if not) and prints both losses at step 1. It prints the
# best and median step per side, their ratios to pre_norm, and PyTorch / normlab (> 1: normlab
# faster). Extra arguments (--set KEY=VALUE ...) go to every run of both.
# Usage: tools/bench/hyper_bench.sh [STEPS=4] [REPEATS=2] [WARMUP=1] [--set KEY=VALUE ...]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${NORMLAB_BUILD_DIR:-$root/build}
py=${NORMLAB_VENV:-$root/.venv}/bin/python
steps=${1:-4} repeats=${2:-2} warmup=${3:-1}
shift $(($# < 3 ? $# : 3))
threads=$(nproc)
data=${NORMLAB_DATA_DIR:-$root/data/kjv}
[ -f "$data/shards/train-00000.bin" ] || "$root/tools/prepare_corpus.sh" >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--set "data.train=$data/shards" --set "data.tokenizer=$data/tokenizer.model"
        --set train.steps=$((steps + warmup)) --set eval.every=0 --set eval.batches=1
        --set checkpoint.at_end=false --set logging.every=1000 "$@")
models=(pre_norm dhc2 dhc4)
args() {  # args MODEL: the config and settings of MODEL, one per line
  case $1 in
    pre_norm) printf '%s\n' "$root/configs/small/lm.yaml" --set model.scheme=pre_norm ;;
    dhc2) printf '%s\n' "$root/configs/small/hyper_dhc2.yaml" ;;
    dhc4) printf '%s\n' "$root/configs/small/hyper_dhc2.yaml" --set model.hyper.n=4 ;;
  esac
}
ours() {  # ours MODEL: appends normlab's timed step seconds to $work/MODEL.ours
  local m=$1 a; mapfile -t a < <(args "$m")
  rm -rf "$work/run"
  "$build/tools/normlab" train --config "${a[0]}" "${common[@]}" "${a[@]:1}" --no-plots \
    --out "$work/run" > "$work/run.out" 2>&1 || { cat "$work/run.out"; echo "hyper_bench: normlab $m failed"; exit 1; }
  "$py" -c 'import json, sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    if j["step"] == 1: print(j["loss"], file=open(sys.argv[3], "w"))
    if j["step"] > int(sys.argv[2]): print(j["step_seconds"])' \
    "$work/run/metrics.jsonl" "$warmup" "$work/$m.loss1.ours" >> "$work/$m.ours"
}
peer() {  # peer MODEL: the same in the PyTorch peer, into $work/MODEL.peer
  local m=$1 a; mapfile -t a < <(args "$m")
  "$build/tools/normlab" config --config "${a[0]}" "${common[@]}" "${a[@]:1}" > "$work/$m.yaml"
  "$py" "$root/tools/bench/torch_train.py" --config "$work/$m.yaml" "$data/shards/train-00000.bin" "$threads" \
    > "$work/peer.out" 2>&1 || { cat "$work/peer.out"; echo "hyper_bench: PyTorch $m failed"; exit 1; }
  awk '$1 == "params" {print $2}' "$work/peer.out" > "$work/$m.params.peer"
  awk '$1 == "step" && ++n == 1 {print $4}' "$work/peer.out" > "$work/$m.loss1.peer"
  awk -v w="$warmup" '$1 == "step" && ++n > w {print $2}' "$work/peer.out" >> "$work/$m.peer"
}
for m in "${models[@]}"; do  # the parameter counts normlab reports for the three models
  mapfile -t a < <(args "$m")
  "$build/tools/normlab" info --config "${a[0]}" "${common[@]}" "${a[@]:1}" \
    | awk '$1 == "parameters" {gsub(",", "", $2); print $2}' > "$work/$m.params.ours"
  : > "$work/$m.ours"; : > "$work/$m.peer"
done
for ((r = 0; r < repeats; r++)); do
  for m in "${models[@]}"; do
    ours "$m"
    peer "$m"
  done
done
"$py" - "$work" "$steps" "$repeats" "$threads" <<'PY'
import statistics, sys
work, steps, repeats, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
models = (("pre_norm", "pre_norm"), ("dhc2", "hyper 2xDHC"), ("dhc4", "hyper 4xDHC"))
read = lambda name: [float(x) for x in open(f"{work}/{name}")]
t = {(m, s): read(f"{m}.{s}") for m, _ in models for s in ("ours", "peer")}
params = {(m, s): int(open(f"{work}/{m}.params.{s}").read()) for m, _ in models for s in ("ours", "peer")}
loss1 = {(m, s): read(f"{m}.loss1.{s}")[0] for m, _ in models for s in ("ours", "peer")}
best = {k: min(v) for k, v in t.items()}
med = {k: statistics.median(v) for k, v in t.items()}
print(f"training step on configs/small ({threads} threads), {repeats} runs x {steps} steps per side; "
      "PyTorch = tools/bench/torch_train.py")
print(f"  {'':<12} {'normlab (s)':>15} {'PyTorch (s)':>15} {'normlab/pre_norm':>17} {'PyTorch/pre_norm':>17}"
      f" {'PyTorch/normlab':>16}")
print(f"  {'model':<12}" + f" {'best':>7} {'median':>7}" * 2 + f" {'best':>8} {'median':>8}" * 3)
for m, label in models:
    row = [best[m, "ours"], med[m, "ours"], best[m, "peer"], med[m, "peer"]]
    ratios = [best[m, "ours"] / best["pre_norm", "ours"], med[m, "ours"] / med["pre_norm", "ours"],
              best[m, "peer"] / best["pre_norm", "peer"], med[m, "peer"] / med["pre_norm", "peer"],
              best[m, "peer"] / best[m, "ours"], med[m, "peer"] / med[m, "ours"]]
    print(f"  {label:<12}" + "".join(f" {x:>7.3f}" for x in row) + "".join(f" {x:>8.2f}" for x in ratios))
print("same model: parameters (normlab info / PyTorch), loss at step 1 (normlab / PyTorch; "
      "different initialisations and batches)")
bad = []
for m, label in models:
    po, pp = params[m, "ours"], params[m, "peer"]
    print(f"  {label:<12} {po:>12,} / {pp:<12,} {loss1[m, 'ours']:.4f} / {loss1[m, 'peer']:.4f}")
    if po != pp:
        bad.append(label)
if bad:
    sys.exit(f"hyper_bench: the PyTorch peer builds a different model for {', '.join(bad)}")
PY
