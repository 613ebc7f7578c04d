#!/usr/bin/env bash
# Everything a GPU session has to check, in one run that fits the device budget (about 10
# minutes on one H200): build with the packed dependencies and run the gpu-label tests
# (tools/gpu/build_and_test.sh), the fused-kernel micro-benchmark (normlab-bench-kernels),
# the single-rank NCCL FSDP run of the 1.3B config (tools/gpu/fsdp_1p3b.sh), then the GPU
# benchmark (tools/bench/gpu_bench.sh) against the
# PyTorch reference, eager and (optionally) torch.compile.
# Prepare here:  tools/gpu/pack_deps.sh deps && tools/prepare_corpus.sh
# On the device: tools/gpu/session.sh [SCHEMES=pre_norm,siamese_hybrid] [COMPILE=0]
#   (carry deps and data/kjv; the results land in $OUT when set, else runs/gpu-session)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
schemes=${1:-pre_norm,siamese_hybrid} compile=${2:-0}
out=${OUT:-$root/runs/gpu-session}
mkdir -p "$out"
log() { echo "==== $(date +%H:%M:%S) $*" | tee -a "$out/session.log"; }
log "build and gpu tests"
"$root/tools/gpu/build_and_test.sh" --deps "$root/deps" --python python3 2>&1 | tail -40 | tee -a "$out/session.log"
normlab=$root/build-gpu/tools/normlab
[ -x "$normlab" ] || { log "no normlab binary: build failed"; exit 1; }
log "fused add + RMSNorm kernel against the ATen composition"
timeout 60 "$root/build-gpu/tools/bench/normlab-bench-kernels" 2>&1 | tee -a "$out/session.log"
log "FSDP, 1 rank over NCCL, 1.3B siamese_hybrid"
timeout 240 "$root/tools/gpu/fsdp_1p3b.sh" "$normlab" "$root/data/kjv" 4 20 2>&1 | tail -15 | tee -a "$out/session.log"
log "GPU benchmark"
timeout 420 "$root/tools/bench/gpu_bench.sh" "$normlab" "$root/data/kjv" "$schemes" 8 10 3 "$compile" 2>&1 \
  | tee -a "$out/session.log"
log "done"
