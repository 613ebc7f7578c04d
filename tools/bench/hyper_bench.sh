#!/usr/bin/env bash
# CPU training step of Hyper-Connections against Pre-Norm (docs/performance-cpu.md,
# "Hyper-Connections"): configs/small/lm.yaml as pre_norm, configs/small/hyper_dhc2.yaml (2xDHC)
# and the same with model.hyper.n=4 (4xDHC), in `normlab train`, alternately REPEATS times, each
# timing STEPS steps after WARMUP untimed ones; best and median step per side, and the ratios to
# pre_norm. Extra arguments (--set KEY=VALUE ...) go to every run.
# Usage: tools/bench/hyper_bench.sh [STEPS=4] [REPEATS=2] [WARMUP=1] [--set KEY=VALUE ...]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${NORMLAB_BUILD_DIR:-$root/build}
py=${NORMLAB_VENV:-$root/.venv}/bin/python
steps=${1:-4} repeats=${2:-2} warmup=${3:-1}
shift $(($# < 3 ? $# : 3))
data=${NORMLAB_DATA_DIR:-$root/data/kjv}
[ -f "$data/shards/train-00000.bin" ] || "$root/tools/prepare_corpus.sh" >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--set "data.train=$data/shards" --set "data.tokenizer=$data/tokenizer.model"
        --set train.steps=$((steps + warmup)) --set eval.every=0 --set eval.batches=1
        --set checkpoint.at_end=false --set logging.every=1000 "$@")
run() {  # run SIDE CONFIG [--set ...]: appends the timed step seconds to $work/SIDE
  local side=$1 cfg=$2; shift 2
  rm -rf "$work/run"
  "$build/tools/normlab" train --config "$root/configs/small/$cfg" "${common[@]}" "$@" --no-plots \
    --out "$work/run" > "$work/run.out" 2>&1 || { cat "$work/run.out"; echo "hyper_bench: $side failed"; exit 1; }
  "$py" -c 'import json, sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    if j["step"] > int(sys.argv[2]): print(j["step_seconds"])' "$work/run/metrics.jsonl" "$warmup" >> "$work/$side"
}
: > "$work/pre_norm"; : > "$work/dhc2"; : > "$work/dhc4"
for ((r = 0; r < repeats; r++)); do
  run pre_norm lm.yaml --set model.scheme=pre_norm
  run dhc2 hyper_dhc2.yaml
  run dhc4 hyper_dhc2.yaml --set model.hyper.n=4
done
"$py" - "$work" "$steps" "$repeats" "$(nproc)" <<'PY'
import statistics, sys
work, steps, repeats, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
sides = (("pre_norm", "pre_norm"), ("dhc2", "hyper 2xDHC"), ("dhc4", "hyper 4xDHC"))
t = {s: [float(x) for x in open(f"{work}/{s}")] for s, _ in sides}
print(f"training step on configs/small ({threads} threads), {repeats} runs x {steps} steps per side")
print(f"  {'side':<14} {'best (s)':>9} {'median (s)':>11} {'best / pre_norm':>16} {'median / pre_norm':>18}")
for s, label in sides:
    b, m = min(t[s]), statistics.median(t[s])
    print(f"  {label:<14} {b:>9.3f} {m:>11.3f} {b / min(t['pre_norm']):>16.2f} "
          f"{m / statistics.median(t['pre_norm']):>18.2f}")
PY
