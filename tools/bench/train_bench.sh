#!/usr/bin/env bash
# Training speed of `normlab train` against a plain PyTorch (Python) loop of the same model and
# settings (tools/bench/torch_train.py: same torch, same thread count, same shards). For each
# scheme the two sides alternate REPEATS times, each run timing STEPS steps after WARMUP
# untimed ones. The machines here are noisy (other tenants slow a run by up to 1.7x, never
# speed it up), so the headline is the best step time of each side over all its runs, as
# timeit does; the medians are printed beside it. Ratio = PyTorch / normlab (> 1: normlab faster).
# Usage: tools/bench/train_bench.sh [SCHEMES (comma list, default all)] [STEPS=3] [REPEATS=2] [WARMUP=1]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${NORMLAB_BUILD_DIR:-$root/build}
py=${NORMLAB_VENV:-$root/.venv}/bin/python
schemes=${1:-pre_norm,post_norm,deep_norm,hybrid_norm,hybrid_norm_star,peri_norm,mix_ln,resi_dual,siamese,siamese_hybrid,reordered_norm}
steps=${2:-3} repeats=${3:-2} warmup=${4:-1}
threads=$(nproc)
"$root/tools/prepare_corpus.sh" >/dev/null
config=$root/configs/small/lm.yaml
shard=$root/data/kjv/shards/train-00000.bin
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The shape of configs/small/lm.yaml, for the peer.
read -r d L H F V T MB GB < <("$py" - "$config" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
def get(key, default):
    m = re.search(r"^\s*" + key + r":\s*(\S+)", text, re.M)
    return m.group(1) if m else default
print(get("d_model", 0), get("n_layers", 0), get("n_heads", 0), get("d_ff", 0), get("vocab_size", 0),
      get("seq_len", 0), get("micro_batch", 0), get("global_batch", 0))
PY
)
total=$((steps + warmup))
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2)}'; }

printf 'training step time, configs/small/lm.yaml (d_model %s, %s layers, batch %s x %s tokens), %s threads, %s runs x %s steps\n' \
  "$d" "$L" "$GB" "$T" "$threads" "$repeats" "$steps"
printf "  %-18s %26s   %26s\n" "" "best step (s)" "median step (s)"
printf "  %-18s %8s %8s %7s   %8s %8s %7s\n" scheme normlab PyTorch ratio normlab PyTorch ratio
for s in ${schemes//,/ }; do
  : > "$work/ours" ; : > "$work/peer" ; : > "$work/ratios"
  for ((r = 0; r < repeats; r++)); do
    : > "$work/ours_run" ; : > "$work/peer_run"
    rm -rf "$work/run"
    "$build/tools/normlab" train --config "$config" --set model.scheme="$s" --set train.steps=$total \
      --set eval.every=0 --set eval.batches=1 --set checkpoint.every=0 --set logging.every=1000 \
      --out "$work/run" >/dev/null 2>&1
    "$py" -c 'import json,sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    if j["step"] > int(sys.argv[2]): print(j["step_seconds"])' "$work/run/metrics.jsonl" "$warmup" > "$work/ours_run"
    "$py" "$root/tools/bench/torch_train.py" "$shard" "$s" "$d" "$L" "$H" "$F" "$V" "$T" "$MB" "$GB" "$total" "$threads" \
      | awk -v w="$warmup" '$1 == "step" && ++n > w {print $2}' > "$work/peer_run"
    cat "$work/ours_run" >> "$work/ours"; cat "$work/peer_run" >> "$work/peer"
  done
  ob=$(sort -g "$work/ours" | head -1) pb=$(sort -g "$work/peer" | head -1)
  om=$(median < "$work/ours") pm=$(median < "$work/peer")
  awk -v s="$s" -v ob="$ob" -v pb="$pb" -v om="$om" -v pm="$pm" \
    'BEGIN { printf "  %-18s %8.3f %8.3f %6.2fx   %8.3f %8.3f %6.2fx\n", s, ob, pb, pb / ob, om, pm, pm / om }'
done
