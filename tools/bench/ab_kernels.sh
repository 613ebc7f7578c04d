#!/usr/bin/env bash
# Two builds' CPU kernels side by side in one invocation: `normlab-bench-kernels --cpu` of a
# baseline build (BASE, e.g. a copy of build/ made before a change) and of this build
# (NORMLAB_BUILD_DIR, default build/), alternating ROUNDS times on this machine. Prints each
# row's median over the rounds: ATen's time (both builds' runs pooled), the baseline's and this
# build's normlab time, and base / this (> 1: this build faster); and "vs ATen", the same ratio
# with each run's normlab time taken over the ATen time of its own process, which cancels the
# host's drift between processes. The order of the two builds alternates from round to round. The per-build library is
# picked with LD_LIBRARY_PATH (the binaries' RUNPATH names their own build folder otherwise).
# Usage: tools/bench/ab_kernels.sh BASE [ROUNDS=3] [normlab-bench-kernels options...]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${NORMLAB_BUILD_DIR:-$root/build}
base=${1:?usage: ab_kernels.sh BASE_BUILD_DIR [ROUNDS] [bench options]}
rounds=${2:-3}
shift $(($# >= 2 ? 2 : 1))
py=${NORMLAB_VENV:-$root/.venv}/bin/python
for b in "$base" "$build"; do
  [ -x "$b/tools/bench/normlab-bench-kernels" ] || { echo "ab_kernels: no $b/tools/bench/normlab-bench-kernels" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); $(nproc) threads; $rounds rounds; base $base, this $build"
side() {  # side NAME BUILD: one run of BUILD's benchmark, appended to $work/NAME
  LD_LIBRARY_PATH="$2/src${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$2/tools/bench/normlab-bench-kernels" --cpu "${args[@]}" >> "$work/$1"
}
args=("$@")
for ((r = 0; r < rounds; r++)); do  # the order alternates, so that neither build always goes first
  if ((r % 2 == 0)); then side base "$base"; side this "$build"; else side this "$build"; side base "$base"; fi
done
"$py" - "$work/base" "$work/this" <<'PY'
import re, statistics, sys
row = re.compile(r"^\s+(\S.*?)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)x$")
def rows(path):
    out = {}
    for line in open(path):
        m = row.match(line.rstrip("\n"))
        if m:
            out.setdefault(m.group(1), []).append((float(m.group(2)), float(m.group(3))))
    return out
base, this = rows(sys.argv[1]), rows(sys.argv[2])
print("  %-42s %9s %9s %9s %9s %9s" % ("op (shape)", "ATen ms", "base ms", "this ms", "base/this",
                                         "vs ATen"))
for name in base:
    if name not in this:
        print("  %-42s only in the base build" % name)
        continue
    aten = statistics.median([a for a, _ in base[name] + this[name]])
    b = statistics.median([o for _, o in base[name]])
    t = statistics.median([o for _, o in this[name]])
    # Each run's normlab time over the ATen time of the same process: the host's drift between
    # processes cancels. The ratio of the two builds' medians of it.
    rb = statistics.median([o / a for a, o in base[name]])
    rt = statistics.median([o / a for a, o in this[name]])
    print("  %-42s %9.3f %9.3f %9.3f %8.2fx %8.2fx" % (name, aten, b, t, b / t, rb / rt))
for name in this:
    if name not in base:
        print("  %-42s only in this build" % name)
PY
