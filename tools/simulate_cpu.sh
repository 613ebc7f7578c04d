#!/usr/bin/env bash
# Runs a command as on a CPU of a lower class: the three libraries inside LibTorch that read the
# CPU for themselves are lowered together, so that normlab, which follows what they see
# (docs/setup.md, "CPU classes"), behaves as on a real CPU of that class.
#   class        ATEN_CPU_CAPABILITY  ONEDNN_MAX_CPU_ISA  MKL_ENABLE_INSTRUCTIONS  like
#   amx          (unset)              AVX512_CORE_AMX     AVX512                   Xeon 4th gen+
#   avx512_bf16  avx512               AVX512_CORE_BF16    AVX512                   Xeon 3rd gen, Zen 4
#   avx512       avx512               AVX512_CORE         AVX512                   Xeon Skylake-SP
#   avx2         avx2                 AVX2                AVX2                     Zen 1-3, most laptops
#   default      default              SSE41               SSE4_2                   none of these
# A class above the CPU's own is refused (a limit cannot raise what the CPU has).
# Usage: tools/simulate_cpu.sh CLASS COMMAND [ARGS...]
#        tools/simulate_cpu.sh --above CLASS   exit 0 when this CPU has more than CLASS
set -euo pipefail
usage="usage: tools/simulate_cpu.sh CLASS COMMAND [ARGS...] | --above CLASS (classes: amx, avx512_bf16, avx512, avx2, default)"
rank() {  # the class's rank, lowest 0
  case $1 in
    default) echo 0 ;; avx2) echo 1 ;; avx512) echo 2 ;; avx512_bf16) echo 3 ;; amx) echo 4 ;;
    *) echo "simulate_cpu: unknown class '$1'; $usage" >&2; exit 2 ;;
  esac
}
# This CPU's class, from /proc/cpuinfo's flags (as cpuinfo and oneDNN read them).
own_rank() {
  local flags
  flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
  has() { for f in "$@"; do [[ $flags == *" $f "* ]] || return 1; done; }
  if has avx512f avx512bw avx512vl avx512dq amx_tile amx_bf16; then echo 4
  elif has avx512f avx512bw avx512vl avx512dq avx512_bf16; then echo 3
  elif has avx512f avx512bw avx512vl avx512dq; then echo 2
  elif has avx2 fma; then echo 1
  else echo 0; fi
}
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
if [ "$1" = --above ]; then
  [ $# -eq 2 ] || { echo "$usage" >&2; exit 2; }
  want=$(rank "$2")
  [ "$(own_rank)" -gt "$want" ]
  exit
fi
class=$1; shift
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
want=$(rank "$class")
[ "$want" -le "$(own_rank)" ] || { echo "simulate_cpu: this CPU is below the class '$class' (a limit cannot raise it)" >&2; exit 2; }
case $class in
  amx)         export ONEDNN_MAX_CPU_ISA=AVX512_CORE_AMX MKL_ENABLE_INSTRUCTIONS=AVX512; unset ATEN_CPU_CAPABILITY ;;
  avx512_bf16) export ATEN_CPU_CAPABILITY=avx512 ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 MKL_ENABLE_INSTRUCTIONS=AVX512 ;;
  avx512)      export ATEN_CPU_CAPABILITY=avx512 ONEDNN_MAX_CPU_ISA=AVX512_CORE MKL_ENABLE_INSTRUCTIONS=AVX512 ;;
  avx2)        export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 ;;
  default)     export ATEN_CPU_CAPABILITY=default ONEDNN_MAX_CPU_ISA=SSE41 MKL_ENABLE_INSTRUCTIONS=SSE4_2 ;;
esac
echo "simulate_cpu: $class (ATEN_CPU_CAPABILITY=${ATEN_CPU_CAPABILITY:-unset} ONEDNN_MAX_CPU_ISA=$ONEDNN_MAX_CPU_ISA MKL_ENABLE_INSTRUCTIONS=$MKL_ENABLE_INSTRUCTIONS)" >&2
exec "$@"
