#!/usr/bin/env bash
# The CPU classes this machine can stand for (its own and the lower ones, tools/simulate_cpu.sh),
# one line each: the class as normlab sees it (`normlab version`) and the fp32 and bf16 matmul
# rates of an N^3 product in that class (tools/bench/matmul_rate.py, ATen: MKL for fp32, oneDNN
# for bf16), with bf16's slowdown against fp32 where it is emulated.
# Usage: tools/bench/cpu_classes.sh [N=512] [REPS=5]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${NORMLAB_BUILD_DIR:-$root/build}
py=${NORMLAB_VENV:-$root/.venv}/bin/python
n=${1:-512} reps=${2:-5}
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //' || true), $(nproc) threads, ${n}^3 matmuls, median of $reps"
printf '%-12s %10s %10s %9s  %s\n' class "fp32 GF/s" "bf16 GF/s" "fp32/bf16" "cpu class (normlab version)"
for class in amx avx512_bf16 avx512 avx2 default; do
  if ! "$root/tools/simulate_cpu.sh" "$class" true 2>/dev/null; then continue; fi
  sim=("$root/tools/simulate_cpu.sh" "$class")
  line=$("${sim[@]}" "$build/tools/normlab" version 2>/dev/null | sed -n 's/^  cpu class: //p')
  f=$("${sim[@]}" "$py" "$root/tools/bench/matmul_rate.py" --device cpu --n "$n" --reps "$reps" --dtype fp32 2>/dev/null | sed -n 's/^matmul_flops=//p')
  b=$("${sim[@]}" "$py" "$root/tools/bench/matmul_rate.py" --device cpu --n "$n" --reps "$reps" --dtype bf16 2>/dev/null | sed -n 's/^matmul_flops=//p')
  awk -v c="$class" -v f="$f" -v b="$b" -v l="$line" 'BEGIN { printf "%-12s %10.1f %10.2f %8.1fx  %s\n", c, f / 1e9, b / 1e9, f / b, l }'
done
