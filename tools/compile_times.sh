#!/usr/bin/env bash
# The slowest steps of the build in BUILD_DIR, from ninja's log (.ninja_log): one line per
# translation unit or link that is still part of the build, slowest first, with its seconds,
# then the sum. Read after a clean build (ccache empty) to see where compile time goes; a step
# rebuilt later counts with its latest time.
# Usage: tools/compile_times.sh [BUILD_DIR] [N=15]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build} n=${2:-15}
log=$build/.ninja_log
[ -f "$log" ] || { echo "compile_times: no $log (build first: tools/build.sh)" >&2; exit 1; }
# Only the outputs the build still has (the log keeps steps of renamed or removed sources).
current=$(ninja -C "$build" -t targets all | cut -d: -f1)
rows=$(awk 'NR == FNR { keep[$1] = 1; next } !/^#/ && ($4 in keep) { secs[$4] = ($2 - $1) / 1000 }
            END { for (o in secs) printf "%.1f %s\n", secs[o], o }' <(echo "$current") "$log" | sort -k1,1nr)
echo "$rows" | head -n "$n" | awk '{ printf "%7.1f s  %s\n", $1, $2 }'
echo "$rows" | awk '{ t += $1; c++ } END { printf "%7.1f s  in all, %d steps (their sum: with 2 jobs the wall time is about half)\n", t, c }'
