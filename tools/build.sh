#!/usr/bin/env bash
# Configures and builds normlab (Release) in build/, after tools/setup.sh has made sure the
# Debian packages and the torch venv are present. Prints how long each phase took.
# Usage: tools/build.sh [--target T]... [extra CMake -D options...]
#   --target T  build only T and what it needs (repeatable; e.g. normlab-cli for the CLI and
#               the library, as tools/demo.sh does); default: every target
# Env:   NORMLAB_BUILD_DIR (default: <repo>/build), NORMLAB_JOBS (default: ninja's choice),
#        NORMLAB_SKIP_SETUP=1 (the caller ran tools/setup.sh already)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${NORMLAB_BUILD_DIR:-$root/build}
targets=() defines=()
while [ $# -gt 0 ]; do
  case $1 in
    --target) [ $# -ge 2 ] || { echo "build: --target needs a target name" >&2; exit 2; }
              targets+=(--target "$2"); shift 2 ;;
    -D*) defines+=("$1"); shift ;;
    *) echo "build: unknown argument '$1' (--target T, or -DVAR=VALUE for CMake)" >&2; exit 2 ;;
  esac
done

t0=$(date +%s)
[ -n "${NORMLAB_SKIP_SETUP:-}" ] || "$root/tools/setup.sh"
t1=$(date +%s)
# The venv tools/setup.sh made ($NORMLAB_VENV when set) provides LibTorch and the tests' Python.
venv_define=()
[ -z "${NORMLAB_VENV:-}" ] || venv_define=(-DNORMLAB_PYTHON="$NORMLAB_VENV/bin/python")
if [ ! -f "$build/build.ninja" ] || [ ${#defines[@]} -gt 0 ]; then
  mkdir -p "$build"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${venv_define[@]}" "${defines[@]}" >"$build/configure.log" 2>&1 \
    || { cat "$build/configure.log" >&2; echo "build: CMake configure failed" >&2; exit 1; }
fi
cmake --build "$build" ${NORMLAB_JOBS:+-j "$NORMLAB_JOBS"} "${targets[@]}"
t2=$(date +%s)
echo "build: setup $((t1 - t0)) s, configure+build $((t2 - t1)) s ($build${targets:+, ${targets[*]}})"
