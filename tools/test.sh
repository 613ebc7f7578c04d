#!/usr/bin/env bash
# Sets up, builds and runs normlab's tests: every label this machine can run (unit, slow, dist,
# gpu; the gpu tests skip cleanly without CUDA). Prints setup, build and test times.
# Usage: tools/test.sh [--quick] [extra ctest arguments...]
#   --quick   the unit label only (the edit loop)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${NORMLAB_BUILD_DIR:-$root/build}
labels=()
if [ "${1:-}" = "--quick" ]; then labels=(-L '^unit$'); shift; fi

t0=$(date +%s)
"$root/tools/build.sh"
t1=$(date +%s)
status=0
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" "${labels[@]}" "$@" || status=$?
t2=$(date +%s)
echo "test: build phase $((t1 - t0)) s, tests $((t2 - t1)) s, exit $status"
exit $status
