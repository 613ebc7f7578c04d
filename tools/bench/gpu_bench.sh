#!/usr/bin/env bash
# Issue 9's GPU benchmark: `normlab train` against the PyTorch reference trainer
# (tools/bench/reference_train.py, eager and torch.compile) on one GPU, side by side in one
# invocation, at the paper's 1.3B shape (configs/1.3b/<scheme>.yaml, seq 2048). For each
# scheme: tokens/s (mean over the timed steps), MFU (FLOPs per token from `normlab info`, 6N
# plus attention, over 989 TFLOP/s dense bf16), peak allocated memory, and the ratios.
# Usage: tools/bench/gpu_bench.sh NORMLAB DATA_DIR [SCHEMES=pre_norm,hybrid_norm,siamese,siamese_hybrid]
#                                 [MICRO=8] [STEPS=10] [WARMUP=3] [COMPILE=1] [PYTHON=python3]
#   DATA_DIR holds shards/ and tokenizer.model (tools/prepare_corpus.sh's data/kjv will do).
# Env: NORMLAB_BENCH_CONFIGS (folder of <scheme>.yaml, default configs/1.3b), NORMLAB_BENCH_DEVICE
#      (default cuda; `cpu` only to smoke-test the script itself).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
normlab=$(realpath "$1") data=$(cd "$2" && pwd)
schemes=${3:-pre_norm,hybrid_norm,siamese,siamese_hybrid}
micro=${4:-8} steps=${5:-10} warmup=${6:-3} compile=${7:-1} python=$(command -v "${8:-python3}")
python=$(cd "$(dirname "$python")" && pwd)/$(basename "$python")  # absolute, venv links kept
configs=${NORMLAB_BENCH_CONFIGS:-$root/configs/1.3b}
device=${NORMLAB_BENCH_DEVICE:-cuda}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
shard=$(ls "$data"/shards/train-*.bin | head -1)
peak=989e12

line() {  # scheme side tokens/s peak_bytes flops_per_token
  awk -v s="$1" -v side="$2" -v t="$3" -v m="$4" -v f="$5" -v p="$peak" \
    'BEGIN { printf "  %-16s %-17s %12.0f %7.1f%% %9.1f GiB\n", s, side, t, 100 * t * f / p, m / 2^30 }'
}
printf 'GPU training, 1.3B shape, seq 2048, micro-batch %s, %s timed steps after %s\n' "$micro" "$steps" "$warmup"
printf "  %-16s %-17s %12s %8s %13s\n" scheme trainer tokens/s MFU "peak memory"
for s in ${schemes//,/ }; do
  cfg=$configs/$s.yaml
  # FLOPs per token ("7.87 GFLOP") and the shape, as normlab resolves them.
  fpt=$("$normlab" info --config "$cfg" | awk '/^FLOPs per token/ { v = $4; u = $5;
        m = (u ~ /^T/) ? 1e12 : (u ~ /^G/) ? 1e9 : (u ~ /^M/) ? 1e6 : 1; print v * m }')
  read -r d L H F V T < <("$normlab" config --config "$cfg" | "$python" -c '
import re, sys
t = sys.stdin.read()
g = lambda k: re.search(r"^\s*" + k + r":\s*(\S+)", t, re.M).group(1)
print(g("d_model"), g("n_layers"), g("n_heads"), g("d_ff"), g("vocab_size"), g("seq_len"))')
  rm -rf "$work/run"
  "$normlab" train --config "$cfg" --out "$work/run" --set "data.train=$data/shards" \
    --set "data.tokenizer=$data/tokenizer.model" --set train.steps=$((warmup + steps)) \
    --set train.micro_batch="$micro" --set train.global_batch="$micro" --set scheduler.warmup_steps=2 \
    --set eval.every=0 --set eval.batches=1 --set checkpoint.every=0 --set checkpoint.at_end=false \
    --set logging.every=1000 --set train.device="$device" > "$work/normlab.out" 2>&1 || { tail -20 "$work/normlab.out"; echo "normlab train failed ($s)"; exit 1; }
  read -r tps mem < <("$python" -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")][int(sys.argv[2]):]
s = json.load(open(sys.argv[1] + "/summary.json"))
print(sum(r["tokens_per_s"] for r in rows) / len(rows), s["peak_memory_bytes"])' "$work/run" "$warmup")
  line "$s" normlab "$tps" "$mem" "$fpt"
  ours=$tps
  for mode in eager compile; do
    [ "$mode" = compile ] && [ "$compile" != 1 ] && continue
    flag=(); [ "$mode" = compile ] && flag=(--compile)
    (cd "$root/tools/bench" && "$python" reference_train.py --shard "$shard" --scheme "$s" --d-model "$d" \
       --n-layers "$L" --n-heads "$H" --d-ff "$F" --vocab "$V" --seq "$T" --micro "$micro" --steps "$steps" \
       --warmup "$warmup" --device "$device" "${flag[@]}") > "$work/ref.out" 2>&1 || { tail -20 "$work/ref.out"; echo "reference failed ($s, $mode)"; exit 1; }
    read -r rt rm < <(sed -n 's/^result tokens_per_s=\([0-9.]*\) peak_bytes=\([0-9]*\).*/\1 \2/p' "$work/ref.out")
    line "$s" "PyTorch $mode" "$rt" "$rm" "$fpt"
    awk -v a="$ours" -v b="$rt" -v m="$mode" 'BEGIN { printf "  %-16s normlab / %-7s %11.3fx\n", "", m, a / b }'
  done
done
