#!/usr/bin/env bash
# Configures and builds normlab (Release) in build/, after tools/setup.sh has made sure the
# Debian packages and the torch venv are present. Prints how long each phase took.
# Usage: tools/build.sh [extra CMake -D options...]
# Env:   NORMLAB_BUILD_DIR (default: <repo>/build), NORMLAB_JOBS (default: ninja's choice)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${NORMLAB_BUILD_DIR:-$root/build}

t0=$(date +%s)
"$root/tools/setup.sh"
t1=$(date +%s)
if [ ! -f "$build/build.ninja" ] || [ $# -gt 0 ]; then
  mkdir -p "$build"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >"$build/configure.log" 2>&1 \
    || { cat "$build/configure.log" >&2; echo "build: CMake configure failed" >&2; exit 1; }
fi
cmake --build "$build" ${NORMLAB_JOBS:+-j "$NORMLAB_JOBS"}
t2=$(date +%s)
echo "build: setup $((t1 - t0)) s, configure+build $((t2 - t1)) s ($build)"
