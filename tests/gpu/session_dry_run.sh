#!/usr/bin/env bash
# The CPU dry run of the GPU session: NORMLAB_BENCH_DEVICE=cpu tools/gpu/session.sh with the
# pack that gpu_pack left, at a tiny shape. Every step must appear in steps.tsv and in the log
# with its time; on this machine the GPU steps (tests, memcheck, kernel timing) are skipped,
# and the benchmark of both schemes and both trainers, the FSDP launch without torchrun and
# the compile step (torch.compile with backend aot_eager on the CPU) run and pass.
# Usage: session_dry_run.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR
set -euo pipefail
normlab=$1 src=$2 python=$4 work=$5
pack=$(dirname "$work")/gpu_pack/unpacked/gpu-pack
fail() { echo "FAIL: $*"; exit 1; }
[ -x "$pack/bin/normlab" ] || fail "no pack at $pack (the gpu_pack test makes it)"
rm -rf "$work"
mkdir -p "$work"
rc=0
OUT=$work PYTHON=$python NORMLAB_BENCH_DEVICE=cpu "$src/tools/gpu/session.sh" --pack "$pack" || rc=$?
cat "$work/steps.tsv"
[ $rc -eq 0 ] || fail "session.sh exited $rc"
for s in probe binaries gpu_tests memcheck kernels bench fsdp moe compile; do
  grep -q "^$s	" "$work/steps.tsv" || fail "step $s is missing from steps.tsv"
  grep -Eq "\] $s: (ok|skipped.*|failed.*|timed out.*) in [0-9]+ s$" "$work/session.log" \
    || fail "session.log shows no status and time for step $s"
done
for s in probe binaries bench fsdp moe compile; do
  grep -q "^$s	ok	" "$work/steps.tsv" || fail "step $s did not pass"
done
for s in gpu_tests memcheck kernels; do
  grep -q "^$s	skipped" "$work/steps.tsv" || fail "step $s should report skipped without a GPU"
done
for row in "pre_norm	normlab	ok" "pre_norm	PyTorch eager	ok" "siamese_hybrid	normlab	ok" \
           "siamese_hybrid	PyTorch eager	ok" "pre_norm	PyTorch compile	ok"; do
  grep -q "^$row	" "$work/bench.tsv" || fail "bench.tsv has no row '$row'"
done
grep -q "normlab / PyTorch eager (siamese_hybrid)" "$work/results.md" || fail "results.md has no ratio"
grep -q "all finite" "$work"/*-fsdp.log || fail "the FSDP step did not report finite losses"
grep -q "grouped / loop step time" "$work"/*-moe.log || fail "the MoE step printed no ratio"
ls "$work"/0[1-9]-*.log >/dev/null || fail "no per-step logs"
echo "PASS"
