#!/usr/bin/env bash
# Runs one libFuzzer target (built by tests/fuzz/build.sh) for a bounded time on its seed corpus.
# Usage: tests/fuzz/run.sh BUILD_DIR TARGET SEED_DIR
# Env:   NORMLAB_FUZZ_SECONDS (default 30)
# New inputs go to BUILD_DIR/corpus-TARGET (the seeds are not touched); a finding is saved in
# BUILD_DIR/findings-TARGET/ and fails the test. Exit 77 (skip) when the target was not built.
set -uo pipefail
build=$1 target=$2 seeds=$3
secs=${NORMLAB_FUZZ_SECONDS:-30}
bin=$build/fuzz_$target
if [ ! -x "$bin" ]; then echo "fuzz_$target: not built (no clang++ with libFuzzer): skipped"; exit 77; fi
work=$build/corpus-$target findings=$build/findings-$target
mkdir -p "$work" "$findings"
log=$build/fuzz_$target.log
# -malloc_limit_mb: any single allocation over 64 MB is a finding (hostile sizes must be
# rejected before they are allocated); -timeout: an input taking 10 s is a finding.
TMPDIR=$build "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=64 -max_len=4096 \
  -print_final_stats=1 -artifact_prefix="$findings/" "$work" "$seeds" >"$log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
  grep -E -A30 "ERROR|runtime error|==[0-9]+==" "$log" | head -80
  echo "fuzz_$target: finding in $findings/ (exit $rc): fix it, then add the input to tests/fuzz/corpus/$target/"
  exit 1
fi
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
echo "fuzz_$target: $runs inputs in $secs s, $cov edges, corpus $(ls "$work" | wc -l) inputs, no finding (PASS)"
