#!/usr/bin/env bash
# Runs the multi-process tests again and again, optionally while every core is kept busy by
# another process, and counts the failures: a failure that shows once in a hundred runs is
# still a failure (docs/reliability.md, "Multi-process runs under load").
# Usage: tools/stress_dist.sh N [--load] [ctest arguments...]
#   N          how many runs
#   --load     keep `nproc` busy loops running for the whole loop (a loaded machine)
#   arguments  passed to ctest instead of the default `-L dist` (e.g. -R dist_fsdp)
# Env:   NORMLAB_BUILD_DIR (default: <repo>/build; the corpus fixture must be prepared there:
#        ctest --test-dir build -R kjv_corpus), NORMLAB_STRESS_LOGS (default:
#        <build>/stress-dist-<date>): the log of every failed run is kept there as run-K.log,
#        with the test's own output files (*.out, summary.json, metrics.jsonl) in run-K/.
# Exit: 0 when every run passed, 1 otherwise; the last line is "stress: F of N runs failed".
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${NORMLAB_BUILD_DIR:-$root/build}
[ $# -ge 1 ] && [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] \
  || { echo "usage: tools/stress_dist.sh N [--load] [ctest arguments...]" >&2; exit 2; }
runs=$1; shift
load=0
if [ "${1:-}" = --load ]; then load=1; shift; fi
selection=("$@")
[ ${#selection[@]} -gt 0 ] || selection=(-L dist)
[ -f "$build/CTestTestfile.cmake" ] || { echo "stress: no build in $build (tools/build.sh)" >&2; exit 2; }
logs=${NORMLAB_STRESS_LOGS:-$build/stress-dist-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$logs"

hogs=()
stop_hogs() {
  for p in "${hogs[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${hogs[@]}"; do wait "$p" 2>/dev/null; done
  hogs=()
}
trap 'stop_hogs; exit 130' INT TERM
trap stop_hogs EXIT
if [ $load -eq 1 ]; then
  for _ in $(seq 1 "$(nproc)"); do
    (trap - INT TERM; while :; do :; done) &
    hogs+=($!)
  done
fi

failed=0 t0=$(date +%s)
for k in $(seq 1 "$runs"); do
  s=$(date +%s)
  rc=0
  ctest --test-dir "$build" --output-on-failure "${selection[@]}" > "$logs/run-$k.log" 2>&1 || rc=$?
  took=$(( $(date +%s) - s ))
  if [ $rc -eq 0 ]; then
    rm -f "$logs/run-$k.log"
    echo "stress: run $k/$runs passed (${took} s)"
  else
    failed=$((failed + 1))
    # The scripts' work folders (<build>/tests/<test name>) are removed by the next run: keep
    # their small files.
    for w in "$build"/tests/dist_* "$build"/tests/train_oracle_fsdp; do
      [ -d "$w" ] || continue
      (cd "$w" && find . -maxdepth 3 \( -name '*.out' -o -name summary.json -o -name metrics.jsonl \
         -o -name train.log \) -print0 | while IFS= read -r -d '' f; do
           mkdir -p "$logs/run-$k/$(basename "$w")/$(dirname "$f")"
           cp "$f" "$logs/run-$k/$(basename "$w")/$f"
         done)
    done
    echo "stress: run $k/$runs FAILED (${took} s, exit $rc): $logs/run-$k.log"
    grep -E '^FAIL|Failed|\*\*\*' "$logs/run-$k.log" | head -5 | sed 's/^/  /'
  fi
done
stop_hogs
echo "stress: $(( $(date +%s) - t0 )) s in all, ctest ${selection[*]}, load $([ $load -eq 1 ] && echo "$(nproc) busy loops" || echo none), logs in $logs"
echo "stress: $failed of $runs runs failed"
[ $failed -eq 0 ]
