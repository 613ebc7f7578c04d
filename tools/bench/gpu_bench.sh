#!/usr/bin/env bash
# The GPU benchmark: `normlab train` against the PyTorch reference trainer
# (tools/bench/reference_train.py, eager and torch.compile) on one GPU, side by side in one
# invocation, at the paper's 1.3B shape (configs/1.3b/<scheme>.yaml, seq 2048).
# For each scheme and side:
# - tokens/s: the timed steps' tokens over their summed (synchronised) seconds, the WARMUP
#   steps before them left out (`normlab mfu`, eval/mfu.h);
# - MFU twice, over the same steps: FLOPs per token from `normlab info` (6N + causal attention)
#   over the GPU's peak dense bf16 rate, looked up by its name (nvidia-smi) in normlab's table
#   (none for a GPU not in it, unless NORMLAB_BENCH_PEAK_TFLOPS gives one), with the spread
#   (standard deviation) of the per-step MFU; and over the matmul rate measured on this device
#   at the start of the invocation (tools/bench/matmul_rate.py);
# - peak allocated memory, and the SDPA kernel each side's attention runs on.
# Then the ratios against normlab. A side that fails or runs past its time limit is reported
# as such and the benchmark goes on with the next side and scheme; the exit status is 1 when
# any side failed.
#
# Usage: tools/bench/gpu_bench.sh NORMLAB DATA_DIR [SCHEMES=pre_norm,siamese_hybrid] [MICRO=8]
#                                 [STEPS=10] [WARMUP=3] [SIDES=normlab,eager,compile] [PYTHON=python3]
#   DATA_DIR holds shards/ and tokenizer.model (tools/prepare_corpus.sh's data/kjv will do).
# Env: NORMLAB_BENCH_CONFIGS  folder of <scheme>.yaml (default configs/1.3b)
#      NORMLAB_BENCH_DEVICE   cuda (default), or cpu to smoke-test the script at a small shape
#      NORMLAB_BENCH_SET      extra `--set key=value` overrides, space-separated, for both sides
#      NORMLAB_BENCH_TIMEOUT  seconds per side (default 300)
#      NORMLAB_BENCH_COMPILE_BACKEND  torch.compile's backend for the compile side (default
#                             inductor; the CPU dry run of tools/gpu/session.sh: aot_eager)
#      NORMLAB_BENCH_GPU      the GPU's name for the peak (default: nvidia-smi's; none on cpu)
#      NORMLAB_BENCH_PEAK_TFLOPS  the peak in TFLOP/s instead of the table's
#      NORMLAB_BENCH_RESULTS  append one TSV row per side here: scheme side status tokens/s
#                             mfu mfu_measured peak_bytes sdpa mfu_spread (mfu and mfu_spread
#                             empty without a peak)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
normlab=$(realpath "$1") data=$(cd "$2" && pwd)
schemes=${3:-pre_norm,siamese_hybrid}
micro=${4:-8} steps=${5:-10} warmup=${6:-3} sides=${7:-normlab,eager,compile}
python=$(command -v "${8:-python3}")
python=$(cd "$(dirname "$python")" && pwd)/$(basename "$python")  # absolute, venv links kept
configs=${NORMLAB_BENCH_CONFIGS:-$root/configs/1.3b}
device=${NORMLAB_BENCH_DEVICE:-cuda}
side_timeout=${NORMLAB_BENCH_TIMEOUT:-300}
results=${NORMLAB_BENCH_RESULTS:-/dev/null}
sets=()
for kv in ${NORMLAB_BENCH_SET:-}; do sets+=(--set "$kv"); done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# torch.compile's kernel cache is not keyed by ATen's CPU capability: a cache filled with the
# native kernels and reused under ATEN_CPU_CAPABILITY=avx2 crashes the compiled model (bus error;
# under =default its C++ no longer compiles; PyTorch 2.11). A lowered capability gets its own cache.
if [ -n "${ATEN_CPU_CAPABILITY:-}" ] && [ -z "${TORCHINDUCTOR_CACHE_DIR:-}" ]; then
  export TORCHINDUCTOR_CACHE_DIR="${TMPDIR:-/tmp}/torchinductor_$(id -un)_$ATEN_CPU_CAPABILITY"
fi
shard=$(ls "$data"/shards/train-*.bin | head -1)
failed=0
gpu=${NORMLAB_BENCH_GPU:-}
if [ -z "$gpu" ] && [ "$device" = cuda ]; then
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null | head -1)
fi
peak_set=(); [ -n "${NORMLAB_BENCH_PEAK_TFLOPS:-}" ] && peak_set=(--peak-tflops "$NORMLAB_BENCH_PEAK_TFLOPS")

matmul=$("$python" "$root/tools/bench/matmul_rate.py" --device "$device" \
         $([ "$device" = cpu ] && echo --n 1024 --reps 3) | sed -n 's/^matmul_flops=//p')
[ -n "$matmul" ] || { echo "gpu_bench: could not measure the matmul rate on $device"; matmul=0; }
printf 'GPU training, %s, seq from the config, micro-batch %s, %s timed steps after %s\n' "$device" "$micro" "$steps" "$warmup"
printf 'matmul rate measured on this device: %.1f TFLOP/s\n' "$(awk -v m="$matmul" 'BEGIN { print m / 1e12 }')"
if [ "$device" = cuda ] || [ ${#peak_set[@]} -gt 0 ]; then
  "$normlab" mfu --flops-per-token 1 --tokens-per-step 1 --gpu "$gpu" "${peak_set[@]}" 1 | head -1 \
    | sed -n "s/.* of \([0-9]* TFLOP\/s (.*)\).*/peak: \1 for '$gpu'/p; s/.*no MFU: \(.*\)/peak: none: \1/p"
else
  echo "peak: none on the CPU (MFU over the measured matmul rate only)"
fi
printf "  %-16s %-17s %12s %14s %9s %12s %-10s\n" scheme trainer tokens/s "MFU +- spread" "MFU(meas)" "peak memory" SDPA

# row SCHEME SIDE STATUS STEP_SECONDS PEAK_BYTES SDPA FLOPS_PER_TOKEN TOKENS_PER_STEP WARMUP:
# prints and records one side; sets row_tps (the window's tokens/s)
row_tps=""
row() {
  if [ "$3" = ok ]; then
    local kv tps mfu spread meas
    # shellcheck disable=SC2086
    kv=$("$normlab" mfu --flops-per-token "$7" --tokens-per-step "$8" --warmup "$9" --gpu "$gpu" \
         "${peak_set[@]}" --matmul-flops "$matmul" $4 | tail -1)
    tps=$(sed -n 's/.*tokens_per_s=\([^ ]*\).*/\1/p' <<< "$kv")
    mfu=$(sed -n 's/.* mfu=\([^ ]*\).*/\1/p' <<< "$kv")
    spread=$(sed -n 's/.* mfu_spread=\([^ ]*\).*/\1/p' <<< "$kv")
    meas=$(sed -n 's/.* mfu_measured=\([^ ]*\).*/\1/p' <<< "$kv")
    row_tps=$tps  # for the ratios
    awk -v s="$1" -v side="$2" -v t="$tps" -v m="$5" -v a="$6" -v u="$mfu" -v d="$spread" -v r="$meas" \
      'BEGIN { printf "  %-16s %-17s %12.0f %14s %8s %8.1f GiB %-10s\n", s, side, t,
               u == "" ? "-" : sprintf("%.1f%% +- %.1f", 100 * u, 100 * d),
               r == "" ? "-" : sprintf("%.1f%%", 100 * r), m / 2^30, a }'
    printf "%s\t%s\tok\t%s\t%s\t%s\t%s\t%s\t%s\n" "$1" "$2" "$tps" "$mfu" "$meas" "${5%.*}" "$6" "$spread" >> "$results"
  else
    printf "  %-16s %-17s %s\n" "$1" "$2" "$3"
    printf "%s\t%s\t%s\t\t\t\t\t\t\n" "$1" "$2" "$3" >> "$results"
    failed=1
  fi
}

for s in ${schemes//,/ }; do
  cfg=$configs/$s.yaml
  # FLOPs per token ("7.87 GFLOP") and the shape, as normlab resolves them.
  fpt=$("$normlab" info --config "$cfg" "${sets[@]}" | awk '/^FLOPs per token/ { v = $4; u = $5;
        m = (u ~ /^T/) ? 1e12 : (u ~ /^G/) ? 1e9 : (u ~ /^M/) ? 1e6 : (u ~ /^k/) ? 1e3 : 1; print v * m }')
  shape=$("$normlab" config --config "$cfg" "${sets[@]}" | "$python" -c '
import re, sys
t = sys.stdin.read()
g = lambda k: re.search(r"^\s*" + k + r":\s*(\S+)", t, re.M).group(1)
print(g("d_model"), g("n_layers"), g("n_heads"), g("d_ff"), g("vocab_size"), g("seq_len"))') \
    || { row "$s" config "failed: normlab config/info rejected $cfg"; continue; }
  read -r d L H F V T <<< "$shape"
  ours=""
  for side in ${sides//,/ }; do
    case $side in
      normlab)
        rm -rf "$work/run"
        timeout "$side_timeout" "$normlab" train --config "$cfg" --out "$work/run" "${sets[@]}" \
          --set "data.train=$data/shards" --set "data.tokenizer=$data/tokenizer.model" \
          --set train.steps=$((warmup + steps)) --set train.micro_batch="$micro" --set train.global_batch="$micro" \
          --set scheduler.warmup_steps=2 --set eval.every=0 --set eval.batches=1 --set checkpoint.every=0 \
          --set checkpoint.at_end=false --set logging.every=1000 --set logging.mfu_warmup="$warmup" \
          --set train.device="$device" > "$work/normlab.out" 2>&1
        rc=$?
        if [ $rc -ne 0 ]; then
          tail -15 "$work/normlab.out" | sed 's/^/    | /'
          row "$s" normlab "$([ $rc -eq 124 ] && echo "timed out after ${side_timeout} s" || echo "failed (exit $rc)")"
          continue
        fi
        secs=$("$python" -c '
import json, sys
print(" ".join(str(json.loads(l)["step_seconds"]) for l in open(sys.argv[1] + "/metrics.jsonl")))' "$work/run")
        read -r mem sdpa < <("$python" -c '
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
print(s["peak_memory_bytes"], s.get("attention_backend", "?"))' "$work/run")
        row "$s" normlab ok "$secs" "$mem" "$sdpa" "$fpt" "$((micro * T))" "$warmup"
        ours=$row_tps ;;
      eager|compile)
        flag=(); [ "$side" = compile ] && flag=(--compile --compile-backend "${NORMLAB_BENCH_COMPILE_BACKEND:-inductor}")
        [ "$device" = cpu ] && flag+=(--no-bf16)  # the CPU dry run: fp32, as the tiny configs train
        (cd "$root/tools/bench" && timeout "$side_timeout" "$python" reference_train.py --shard "$shard" --scheme "$s" \
           --d-model "$d" --n-layers "$L" --n-heads "$H" --d-ff "$F" --vocab "$V" --seq "$T" --micro "$micro" \
           --steps "$steps" --warmup "$warmup" --device "$device" "${flag[@]}") > "$work/ref.out" 2>&1
        rc=$?
        if [ $rc -ne 0 ]; then
          tail -15 "$work/ref.out" | sed 's/^/    | /'
          row "$s" "PyTorch $side" "$([ $rc -eq 124 ] && echo "timed out after ${side_timeout} s" || echo "failed (exit $rc)")"
          continue
        fi
        read -r rm ra < <(sed -n 's/^result tokens_per_s=[0-9.]* peak_bytes=\([0-9]*\) .*sdpa=\([a-z]*\).*/\1 \2/p' "$work/ref.out")
        rsecs=$(sed -n 's/^step \([0-9.]*\)$/\1/p' "$work/ref.out" | tr '\n' ' ')  # timed steps only
        row "$s" "PyTorch $side" ok "$rsecs" "$rm" "$ra" "$fpt" "$((micro * T))" 0
        rt=$row_tps
        [ -n "$ours" ] && awk -v a="$ours" -v b="$rt" -v m="$side" 'BEGIN { printf "  %-16s normlab / %-7s %11.3fx\n", "", m, a / b }' ;;
      *) echo "gpu_bench: unknown side '$side' (normlab, eager, compile)"; failed=1 ;;
    esac
  done
done
exit $failed
