#!/usr/bin/env bash
# Training speed of the Mixture-of-Experts model on the CPU (docs/performance-cpu.md, "MoE"):
# configs/moe/small.yaml (8 experts of 256, top-2, every block) for SCHEME in normlab and in the
# plain PyTorch peer (tools/bench/torch_train.py: a loop over the experts on tokens sorted by
# expert), the same model in normlab with model.moe.dispatch = grouped (two grouped GEMMs for
# all experts instead of the loop), and the dense model of equal active parameters in normlab
# (d_ff = top_k * d_expert = 512: the same expert FLOPs per token, without routing) for the
# dispatch overhead. The sides
# alternate REPEATS times, each timing STEPS steps after WARMUP; best and median step times.
# Usage: tools/bench/moe_bench.sh [SCHEME=pre_norm] [STEPS=4] [REPEATS=2] [WARMUP=1]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${NORMLAB_BUILD_DIR:-$root/build}
py=${NORMLAB_VENV:-$root/.venv}/bin/python
scheme=${1:-pre_norm} steps=${2:-4} repeats=${3:-2} warmup=${4:-1}
threads=$(nproc)
data=${NORMLAB_DATA_DIR:-$root/data/kjv}
[ -f "$data/shards/train-00000.bin" ] || "$root/tools/prepare_corpus.sh" >/dev/null
config=$root/configs/moe/small.yaml
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
total=$((steps + warmup))
# configs/small/lm.yaml's shape with configs/moe/small.yaml's experts (read by normlab itself).
"$build/tools/normlab" config --config "$config" > "$work/resolved.yaml"
read -r d L H F V T MB GB E K DE LBW ZW < <("$py" - "$work/resolved.yaml" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
def get(key):
    return re.search(r"^\s*" + key + r":\s*(\S+)", text, re.M).group(1)
print(*(get(k) for k in ("d_model", "n_layers", "n_heads", "d_ff", "vocab_size", "seq_len", "micro_batch",
                         "global_batch", "n_experts", "top_k", "d_expert", "lb_loss_weight", "z_loss_weight")))
PY
)
dense_ff=$((K * DE))
common=(--set model.scheme="$scheme" --set "data.train=$data/shards" --set "data.tokenizer=$data/tokenizer.model"
        --set train.steps=$total --set eval.every=0 --set eval.batches=1 --set checkpoint.at_end=false
        --set logging.every=1000)
normlab_steps() {  # config, extra --set..., out file
  local cfg=$1 out=$2; shift 2
  rm -rf "$work/run"
  "$build/tools/normlab" train --config "$cfg" "${common[@]}" "$@" --out "$work/run" >/dev/null 2>&1
  "$py" -c 'import json,sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    if j["step"] > int(sys.argv[2]): print(j["step_seconds"])' "$work/run/metrics.jsonl" "$warmup" >> "$out"
}
: > "$work/moe"; : > "$work/peer"; : > "$work/grouped"; : > "$work/dense"
for ((r = 0; r < repeats; r++)); do
  normlab_steps "$config" "$work/moe"
  "$py" "$root/tools/bench/torch_train.py" "$data/shards/train-00000.bin" "$scheme" "$d" "$L" "$H" "$F" "$V" "$T" \
    "$MB" "$GB" "$total" "$threads" "$E" "$K" "$DE" "$LBW" "$ZW" \
    | awk -v w="$warmup" '$1 == "step" && ++n > w {print $2}' >> "$work/peer"
  normlab_steps "$config" "$work/grouped" --set model.moe.dispatch=grouped
  normlab_steps "$config" "$work/dense" --set model.moe.n_experts=0 --set model.d_ff=$dense_ff
done
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2)}'; }
printf 'MoE training step, %s on configs/moe/small.yaml (d_model %s, %s layers, %s experts of %s, top-%s; batch %s x %s tokens), %s threads, %s runs x %s steps\n' \
  "$scheme" "$d" "$L" "$E" "$DE" "$K" "$GB" "$T" "$threads" "$repeats" "$steps"
for side in moe peer grouped dense; do
  label=$(case $side in moe) echo "normlab MoE";; peer) echo "PyTorch MoE (sorted loop)";;
          grouped) echo "normlab MoE, grouped GEMMs";; dense) echo "normlab dense, d_ff $dense_ff";; esac)
  printf '  %-28s best %.3f s  median %.3f s\n' "$label" "$(sort -g "$work/$side" | head -1)" "$(median < "$work/$side")"
done
awk -v a="$(sort -g "$work/moe" | head -1)" -v b="$(sort -g "$work/peer" | head -1)" -v c="$(sort -g "$work/dense" | head -1)" \
    -v g="$(sort -g "$work/grouped" | head -1)" \
  'BEGIN { printf "  PyTorch / normlab MoE (best): %.2fx;  dispatch overhead, normlab MoE / dense (best): %.2fx;  grouped / loop (best): %.2fx\n", b / a, a / c, g / a }'
