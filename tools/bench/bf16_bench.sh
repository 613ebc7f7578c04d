#!/usr/bin/env bash
# Training speed on the CPU in the CPU class's fastest precision, side by side in one
# invocation: `normlab train` against the PyTorch reference trainer
# (tools/bench/reference_train.py: the same model, F.scaled_dot_product_attention, AdamW) in
# eager mode and under torch.compile. Same torch, same threads, same shards, one micro-batch of
# MICRO sequences a step on every side. Sides:
#   bf16, fp32                normlab train with train.precision = bf16 / fp32
#   eager, compile            the reference with bf16 autocast
#   eager_fp32, compile_fp32  the reference in fp32
#   base_bf16, base_fp32      normlab train of another build, NORMLAB_BASE_BUILD (e.g. a copy of
#                             build/ made before a change): a before/after comparison in one run
# The default sides follow the CPU as normlab sees it (`normlab version`): where bf16 is native
# (AMX or AVX512-BF16) bf16,fp32,eager,compile; else fp32,eager_fp32,compile_fp32 (bf16 is
# emulated there, 4x to 600x slower in matmuls). tools/simulate_cpu.sh runs it as a
# lower class. The sides alternate REPEATS times, each run timing STEPS steps after WARMUP
# untimed ones (torch.compile compiles during the warm-up). The headline is each side's best
# step over all its runs (the machines here are noisy; a busy neighbour only slows a run down);
# medians beside it. Ratios: the other side's time over the first side's (> 1: the first side
# faster). Last, the fp32 matmul rate (2048^3, ATen) measured in the same run, after each
# round of sides (5 calls each time; the bf16 rate too where bf16 is native), and the share of
# each that the first normlab side reaches, its own precision's rate first
# (model FLOPs: 6N + causal attention): its best step and its median step against the run's
# matmul rate (the median of the rounds' median rates: the rate as matmul_rate.py and normlab's
# measure_matmul_flops give it), and, stricter, its best step against the single fastest matmul
# call of the run.
# Shapes: small = configs/small/lm.yaml (d_model 256, 6 layers, d_ff 688, seq 256);
#         512   = d_model 512, 8 layers, 8 heads, d_ff 1376, seq 256.
# Usage: tools/bench/bf16_bench.sh [SHAPE=512] [SCHEME=pre_norm] [STEPS=4] [REPEATS=2] [WARMUP=2]
#                                  [SIDES=by class] [MICRO=8]
# Prints the CPU's model name, its bf16 flags (amx_tile, amx_bf16, avx512_bf16) and its class.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${NORMLAB_BUILD_DIR:-$root/build}
py=${NORMLAB_VENV:-$root/.venv}/bin/python
shape=${1:-512} scheme=${2:-pre_norm} steps=${3:-4} repeats=${4:-2} warmup=${5:-2}
sides=${6:-} micro=${7:-8}
threads=$(nproc)
case $shape in
  small) d=256 L=6 H=8 F=688 ;;
  512) d=512 L=8 H=8 F=1376 ;;
  *) echo "bf16_bench: unknown shape '$shape' (small, 512)" >&2; exit 2 ;;
esac
V=4096 T=256
"$root/tools/prepare_corpus.sh" >/dev/null
# torch.compile's kernel cache is not keyed by the CPU class: kernels cached as one class crash
# another (a malloc abort when the AMX class's cache was reused under tools/simulate_cpu.sh
# avx512), so each class gets a cache of its own.
if [ -z "${TORCHINDUCTOR_CACHE_DIR:-}" ]; then
  export TORCHINDUCTOR_CACHE_DIR="${TMPDIR:-/tmp}/torchinductor_$(id -un)_${ATEN_CPU_CAPABILITY:-native}_${ONEDNN_MAX_CPU_ISA:-native}"
fi
config=$root/configs/small/lm.yaml
shard=$root/data/kjv/shards/train-00000.bin
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
total=$((steps + warmup))
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2)}'; }

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //' || true)
flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | { grep -x -e amx_tile -e amx_bf16 -e avx512_bf16 || true; } | tr '\n' ' ')
version=$("$build/tools/normlab" version)
class=$(sed -n 's/^  cpu class: //p' <<< "$version")
echo "cpu: ${cpu:-unknown}; bf16 flags: ${flags:-none}; $threads threads"
echo "cpu class: $class"
echo "$(grep '^train.precision' <<< "$version")"
if [ -z "$sides" ]; then
  case $class in
    *"bf16 native"*) sides=bf16,fp32,eager,compile ;;
    *) sides=fp32,eager_fp32,compile_fp32
       echo "sides: fp32 (bf16 is emulated on this CPU, 4x to 600x slower in matmuls; SIDES=bf16,... asks for it anyway)" ;;
  esac
fi
printf 'training step, %s: d_model %s, %s layers, d_ff %s, %s x %s tokens a step, %s runs x %s steps (+%s warm-up)\n' \
  "$scheme" "$d" "$L" "$F" "$micro" "$T" "$repeats" "$steps" "$warmup"

run_side() {  # side -> step seconds of the timed steps, one per line
  local side=$1
  case $side in
    bf16|fp32|base_bf16|base_fp32)
      local bin=$build/tools/normlab lib=$build/src
      if [ "${side#base_}" != "$side" ]; then
        [ -n "${NORMLAB_BASE_BUILD:-}" ] || { echo "bf16_bench: side $side needs NORMLAB_BASE_BUILD" >&2; exit 2; }
        bin=$NORMLAB_BASE_BUILD/tools/normlab lib=$NORMLAB_BASE_BUILD/src
      fi
      rm -rf "$work/run"
      LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$bin" train --config "$config" --set model.scheme="$scheme" \
        --set model.d_model=$d --set model.n_layers=$L --set model.n_heads=$H --set model.d_ff=$F \
        --set train.precision="${side#base_}" --set train.steps=$total --set train.global_batch=$micro \
        --set train.micro_batch=$micro --set eval.every=0 --set eval.batches=1 \
        --set checkpoint.every=0 --set logging.every=1000 --out "$work/run" >"$work/log" 2>&1 \
        || { cat "$work/log" >&2; exit 1; }
      "$py" -c 'import json,sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    if j["step"] > int(sys.argv[2]): print(j["step_seconds"])' "$work/run/metrics.jsonl" "$warmup" ;;
    eager|compile|eager_fp32|compile_fp32)
      local flag=()
      case $side in compile*) flag=(--compile) ;; esac
      case $side in *_fp32) flag+=(--no-bf16) ;; esac
      (cd "$root/tools/bench" && "$py" reference_train.py --shard "$shard" --scheme "$scheme" \
        --d-model $d --n-layers $L --n-heads $H --d-ff $F --vocab $V --seq $T --micro $micro \
        --steps $steps --warmup $warmup --device cpu --threads $threads "${flag[@]}") >"$work/log" 2>&1 \
        || { cat "$work/log" >&2; exit 1; }
      awk '$1 == "step" {print $2}' "$work/log" ;;
    *) echo "bf16_bench: unknown side '$side' (bf16, fp32, eager, compile, eager_fp32, compile_fp32, base_bf16, base_fp32)" >&2; exit 2 ;;
  esac
}

for side in ${sides//,/ }; do : > "$work/times_$side"; done
: > "$work/rates" && : > "$work/rates_best" && : > "$work/rates_bf16" && : > "$work/rates_bf16_best"
native_bf16=0
case $class in *"bf16 native"*) native_bf16=1 ;; esac
for ((r = 0; r < repeats; r++)); do
  for side in ${sides//,/ }; do run_side "$side" >> "$work/times_$side"; done
  "$py" "$root/tools/bench/matmul_rate.py" --device cpu --n 2048 --reps 5 --best > "$work/rate_out"
  sed -n 's/^matmul_flops=//p' "$work/rate_out" >> "$work/rates"
  sed -n 's/^matmul_flops_best=//p' "$work/rate_out" >> "$work/rates_best"
  if [ "$native_bf16" = 1 ]; then  # emulated bf16 would take minutes at 2048^3
    "$py" "$root/tools/bench/matmul_rate.py" --device cpu --n 2048 --reps 5 --best --dtype bf16 > "$work/rate_out"
    sed -n 's/^matmul_flops=//p' "$work/rate_out" >> "$work/rates_bf16"
    sed -n 's/^matmul_flops_best=//p' "$work/rate_out" >> "$work/rates_bf16_best"
  fi
done
first=${sides%%,*}
printf "  %-26s %10s %10s %14s %14s\n" side "best (s)" "median (s)" "best / $first" "median / $first"
base_b=$(sort -g "$work/times_$first" | head -1) base_m=$(median < "$work/times_$first")
for side in ${sides//,/ }; do
  b=$(sort -g "$work/times_$side" | head -1) m=$(median < "$work/times_$side")
  case $side in
    bf16) name="normlab bf16" ;; fp32) name="normlab fp32" ;;
    eager) name="PyTorch eager bf16 autocast" ;; compile) name="torch.compile bf16 autocast" ;;
    eager_fp32) name="PyTorch eager fp32" ;; compile_fp32) name="torch.compile fp32" ;;
    base_bf16) name="normlab bf16, base build" ;; base_fp32) name="normlab fp32, base build" ;;
  esac
  awk -v n="$name" -v b="$b" -v m="$m" -v bb="$base_b" -v bm="$base_m" 'BEGIN {
    printf "  %-26s %10.3f %10.3f %13.2fx %13.2fx\n", n, b, m, b / bb, m / bm }'
done
# The first normlab side's model FLOP rate against the matmul rates of this run: its own
# precision's first (bf16 where it trains in bf16), then the other one where it was measured.
if [ "$first" = bf16 ] || [ "$first" = fp32 ]; then
  fpt=$(sed -n 's/.* \([0-9.e+]*\) FLOP per token.*/\1/p' "$work/run/train.log" | head -1)
  share() {  # share DTYPE RATES BEST_RATES
    [ -s "$2" ] || return 0
    local rate_b rate_m
    rate_b=$(sort -g "$3" | tail -1) rate_m=$(median < "$2")
    awk -v f="$fpt" -v t=$((micro * T)) -v b="$base_b" -v m="$base_m" -v rb="$rate_b" -v rm="$rate_m" -v s="$first" -v d="$1" 'BEGIN {
      printf "normlab %s, model FLOPs against the %s matmul rate of this run (2048^3, the median call) %.1f GFLOP/s:\n", s, d, rm / 1e9
      printf "  best step %.1f GFLOP/s: %.1f %%; median step %.1f GFLOP/s: %.1f %%\n",
        f * t / b / 1e9, 100 * f * t / b / rm, f * t / m / 1e9, 100 * f * t / m / rm
      printf "  best step against the fastest %s matmul call of this run (%.1f GFLOP/s): %.1f %%\n",
        d, rb / 1e9, 100 * f * t / b / rb }'
  }
  if [ "$first" = bf16 ]; then
    share bf16 "$work/rates_bf16" "$work/rates_bf16_best"
    share fp32 "$work/rates" "$work/rates_best"
  else
    share fp32 "$work/rates" "$work/rates_best"
    share bf16 "$work/rates_bf16" "$work/rates_bf16_best"
  fi
fi
