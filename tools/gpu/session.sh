#!/usr/bin/env bash
# One GPU session in one call, sized for a short device lease: every GPU number normlab needs,
# in an order that puts correctness first, within a time budget (default 8.5 minutes).
#   1 probe     nvidia-smi, nvcc, g++, cmake, torch, cuDNN and NCCL versions, compute-sanitizer
#   2 binaries  the pack (tools/gpu/pack.sh) when present, else a build of just the session's
#               targets (needs the dependency prefix of tools/gpu/pack_deps.sh in deps/)
#   3 tests     the GPU tests, then compute-sanitizer memcheck on the kernel tests
#   4 kernels   the fused add + RMSNorm micro-benchmark
#   5 bench     normlab against the PyTorch reference in eager mode, pre_norm and
#               siamese_hybrid at 1.3B, seq 2048, micro-batch 8
#   6 fsdp      the single-rank NCCL FSDP run of configs/1.3b/siamese_hybrid.yaml, 20 steps,
#               started without torchrun (RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1) and
#               with a 60 s communication timeout
#   7 moe       the MoE dispatch, loop against grouped GEMMs, on configs/moe/olmoe_1b7b.yaml cut
#               to 2 blocks (tools/gpu/moe_dispatch.sh), only if time is left
#   8 compile   the reference under torch.compile for pre_norm, only if time is left
# Each step has its own time limit (cut to what is left of the budget); a failed or timed-out
# step is reported and the session goes on. Every step writes its log into the output folder
# as it runs (NN-name.log); steps.tsv and the last lines printed list each step's status and
# seconds, and results.md gathers the numbers.
#
# Usage: tools/gpu/session.sh [--pack DIR] [--build DIR] [--budget SECONDS]
#   --pack DIR    the pack (default: <repo>/gpu-pack when it holds bin/normlab)
#   --build DIR   use this build tree's binaries instead of a pack (no build is run)
#   --budget S    the whole session's seconds (default 510)
# Env: OUT                   output folder (default <repo>/runs/gpu-session)
#      PYTHON                the python with torch (default python3)
#      NORMLAB_BENCH_DEVICE  cuda (default); cpu runs the same steps at a tiny shape (the dry run)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pack="" build="" budget=510
while [ $# -gt 0 ]; do
  case $1 in
    --pack) pack=$(cd "$2" && pwd); shift 2 ;;
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "session: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ -z "$pack" ] && [ -z "$build" ] && [ -x "$root/gpu-pack/bin/normlab" ] && pack=$root/gpu-pack
out=${OUT:-$root/runs/gpu-session}
mkdir -p "$out"
out=$(cd "$out" && pwd)
python=$(command -v "${PYTHON:-python3}") || { echo "session: no ${PYTHON:-python3}" >&2; exit 1; }
device=${NORMLAB_BENCH_DEVICE:-cuda}
reserve=10   # seconds kept for the report at the end
n=0 failures=0
: > "$out/steps.tsv"
: > "$out/bench.tsv"

say() { echo "[session $(printf '%4d' "$SECONDS") s] $*" | tee -a "$out/session.log"; }

# step NAME LIMIT COMMAND...: runs COMMAND with its output in NN-NAME.log, under
# min(LIMIT, what is left of the budget); records status and seconds.
step() {
  local name=$1 limit=$2; shift 2
  n=$((n + 1))
  local log=$out/$(printf '%02d' "$n")-$name.log
  local left=$((budget - reserve - SECONDS))
  [ "$limit" -gt "$left" ] && limit=$left
  if [ "$limit" -lt 5 ]; then
    say "$name: skipped (no time left in the ${budget} s budget)"
    printf '%s\tskipped (no time)\t0\n' "$name" >> "$out/steps.tsv"
    return 0
  fi
  say "$name: start (limit ${limit} s, log $(basename "$log"))"
  local t0=$SECONDS rc=0
  # In its own process group under timeout, so a step's children end with it. Shell functions
  # of this script run in a child bash (they are exported, with the variables they read).
  if declare -F "$1" >/dev/null; then
    timeout --kill-after=5 "$limit" bash -c '"$@"' "$name" "$@" > "$log" 2>&1 < /dev/null || rc=$?
  else
    timeout --kill-after=5 "$limit" "$@" > "$log" 2>&1 < /dev/null || rc=$?
  fi
  local secs=$((SECONDS - t0)) status=ok
  if [ $rc -eq 77 ]; then status="skipped ($(tail -1 "$log"))"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then status="timed out after ${limit} s"; failures=$((failures + 1))
  elif [ $rc -ne 0 ]; then status="failed (exit $rc)"; failures=$((failures + 1))
  fi
  printf '%s\t%s\t%d\n' "$name" "$status" "$secs" >> "$out/steps.tsv"
  say "$name: $status in ${secs} s"
  case $status in ok|skipped*) ;; *) tail -15 "$log" | sed 's/^/    | /' | tee -a "$out/session.log" ;; esac
  return 0
}

# The pack's environment before any step: env.sh stops the session when this torch is not the
# pack's or the NVIDIA driver is too old for its CUDA, with a message saying which.
if [ -n "$pack" ]; then
  # shellcheck disable=SC1091
  source "$pack/env.sh" "$python" || { say "the pack's env.sh refused this machine: no step ran"; exit 1; }
fi

# ---- 1. probe ------------------------------------------------------------------------------------
probe() {
  for c in "nvidia-smi" "nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv" \
           "nvcc --version" "g++ --version" "cmake --version" "ninja --version" "compute-sanitizer --version"; do
    echo "\$ $c"
    timeout 20 $c 2>&1 | head -12 || echo "(not available)"
  done
  echo "\$ $python -c 'import torch ...'"
  timeout 60 "$python" - <<'PY'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
print("cudnn", torch.backends.cudnn.version(), "nccl", ".".join(map(str, torch.cuda.nccl.version())) if torch.version.cuda else "-")
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"cuda:{i} {p.name} sm_{p.major}{p.minor} {p.total_memory / 2**30:.1f} GiB")
PY
}
export -f probe
export python out device root
step probe 60 probe
cp "$out/01-probe.log" "$out/probe.txt" 2>/dev/null

# ---- 2. binaries ---------------------------------------------------------------------------------
if [ -n "$pack" ]; then
  bin=$pack/bin normlab=$pack/bin/normlab tests=$pack/bin/normlab_gpu_tests bench=$pack/bin/normlab-bench-kernels
  data=$pack/data/kjv
  step binaries 30 "$normlab" version
else
  if [ -z "$build" ]; then
    build=$root/build-gpu
    step build 300 "$root/tools/gpu/build_and_test.sh" --deps "$root/deps" --python "$python" --build "$build" --no-test
  fi
  normlab=$build/tools/normlab tests=$build/tests/normlab_gpu_tests bench=$build/tools/bench/normlab-bench-kernels
  data=${NORMLAB_SESSION_DATA:-$root/data/kjv}
  step binaries 30 "$normlab" version
fi
if [ ! -x "$normlab" ]; then
  say "no normlab binary: nothing else can run"
  exit 1
fi

# ---- 3. correctness: GPU tests, memcheck on the kernels -----------------------------------------
export normlab tests bench data
gpu_tests() {  # all tests skipped (no CUDA device) is a skip, not a pass
  "$tests" --gtest_color=no 2>&1 | tee "$out/gpu_tests.txt"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] && ! grep -q '^\[  PASSED  \] [1-9]' "$out/gpu_tests.txt" \
    && { echo "every GPU test skipped: no CUDA device"; return 77; }
  return "$rc"
}
sanitize() {
  command -v compute-sanitizer >/dev/null || { echo "compute-sanitizer is not on PATH"; return 77; }
  [ "$device" = cuda ] || { echo "no GPU in the dry run"; return 77; }
  # Without the caching allocator every tensor is its own allocation, so memcheck sees
  # accesses past a tensor's end that a cached block would hide.
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 3 \
    "$tests" --gtest_color=no --gtest_filter='GpuKernels.*:GpuSmoke.OwnKernels*'
}
kernels() {
  "$bench" || return
  [ "$device" = cuda ] || { echo "no GPU in the dry run: nothing timed"; return 77; }
}
export -f gpu_tests sanitize kernels
step gpu_tests 150 gpu_tests
step memcheck 150 sanitize

# ---- 4. the kernel micro-benchmark ---------------------------------------------------------------
step kernels 60 kernels

# ---- 5. normlab against the PyTorch reference, eager ---------------------------------------------
micro=8 steps=10 warmup=3 side_timeout=100
if [ "$device" = cpu ]; then  # the dry run: a tiny model of the same configs, a few steps
  export NORMLAB_BENCH_SET="model.vocab_size=4096 model.d_model=64 model.n_layers=2 model.n_heads=4 model.d_ff=176 data.seq_len=64 train.precision=fp32"
  micro=2 steps=2 warmup=1 side_timeout=120
  # The compile step traces the model (TorchDynamo, AOTAutograd) without generating code:
  # Inductor's CPU backend, which the GPU session never uses, compiled C++ for about a minute
  # in each new checkout (2026-12-06, 2-core Xeon: 57 s in .ci/run; aot_eager 8 s).
  export NORMLAB_BENCH_COMPILE_BACKEND=${NORMLAB_BENCH_COMPILE_BACKEND:-aot_eager}
fi
export NORMLAB_BENCH_DEVICE=$device NORMLAB_BENCH_RESULTS=$out/bench.tsv NORMLAB_BENCH_TIMEOUT=$side_timeout
step bench 300 "$root/tools/bench/gpu_bench.sh" "$normlab" "$data" pre_norm,siamese_hybrid $micro $steps $warmup \
  normlab,eager "$python"

# ---- 6. single-rank NCCL FSDP at 1.3B, without torchrun ----------------------------------------
fsdp() {
  if [ "$device" = cpu ]; then
    "$root/tools/gpu/fsdp_1p3b.sh" "$normlab" "$data" "$out/fsdp-run" 2 3 "$python"
  else
    "$root/tools/gpu/fsdp_1p3b.sh" "$normlab" "$data" "$out/fsdp-run" 4 20 "$python"
  fi
}
export -f fsdp
step fsdp 150 fsdp

# ---- 7. the MoE dispatch, loop against grouped GEMMs, if time is left -----------------------------
moe() {
  if [ "$device" = cpu ]; then
    "$root/tools/gpu/moe_dispatch.sh" "$normlab" "$data" "$out/moe-runs" 2 4 2 "$python"
  else
    "$root/tools/gpu/moe_dispatch.sh" "$normlab" "$data" "$out/moe-runs" 4 12 2 "$python"
  fi
}
export -f moe
if [ $((budget - reserve - SECONDS)) -ge 90 ]; then
  step moe 120 moe
else
  say "moe: skipped ($((budget - reserve - SECONDS)) s left, needs 90)"
  printf 'moe\tskipped (no time)\t0\n' >> "$out/steps.tsv"
fi

# ---- 8. torch.compile for pre_norm, if time is left ---------------------------------------------
if [ $((budget - reserve - SECONDS)) -ge 90 ]; then
  export NORMLAB_BENCH_TIMEOUT=$((budget - reserve - SECONDS - 5))
  step compile 400 "$root/tools/bench/gpu_bench.sh" "$normlab" "$data" pre_norm $micro $steps $warmup compile "$python"
else
  say "compile: skipped ($((budget - reserve - SECONDS)) s left, needs 90)"
  printf 'compile\tskipped (no time)\t0\n' >> "$out/steps.tsv"
fi

# ---- report ------------------------------------------------------------------------------------
"$python" - "$out" <<'PY' | tee "$out/results.md"
import csv, os, sys
out = sys.argv[1]
print("# GPU session results\n")
print("| step | status | seconds |\n|---|---|---:|")
for name, status, secs in csv.reader(open(f"{out}/steps.tsv"), delimiter="\t"):
    print(f"| {name} | {status} | {secs} |")
rows = [r for r in csv.reader(open(f"{out}/bench.tsv"), delimiter="\t") if r]
if rows:
    print("\n| scheme | trainer | status | tokens/s | MFU (GPU's peak) +- spread | MFU (measured matmul) | peak GiB | SDPA |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    ours = {}
    pct = lambda v: f"{100 * float(v):.1f} %" if v else "-"
    for s, side, status, tps, mfu, mfu_m, peak, sdpa, *rest in rows:
        if status != "ok":
            print(f"| {s} | {side} | {status} | | | | | |")
            continue
        spread = f" +- {100 * float(rest[0]):.1f}" if mfu and rest and rest[0] else ""
        print(f"| {s} | {side} | ok | {float(tps):.0f} | {pct(mfu)}{spread} | {pct(mfu_m)} "
              f"| {int(peak) / 2**30:.1f} | {sdpa} |")
        if side == "normlab":
            ours[s] = float(tps)
    for s, side, status, tps, *_ in rows:
        if side != "normlab" and status == "ok" and s in ours:
            print(f"\nnormlab / {side} ({s}): {ours[s] / float(tps):.3f}x", end="")
    print()
PY
say "done in ${SECONDS} s of ${budget}: $failures step(s) failed; logs and results.md in $out"
exit $((failures > 0))
