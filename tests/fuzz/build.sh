#!/usr/bin/env bash
# Configures and builds the libFuzzer targets (tests/fuzz/CMakeLists.txt) with clang++.
# Usage: tests/fuzz/build.sh BUILD_DIR. Without clang++ or libFuzzer it builds nothing and exits
# 77 (CTest: skipped), and the fuzz tests (tests/fuzz/run.sh) skip too.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$1
cxx=$(command -v clang++ || command -v clang++-14 || true)
if [ -z "$cxx" ]; then echo "fuzz: no clang++ (tools/setup.sh installs it): skipped"; exit 77; fi
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
     "$cxx" -x c++ -fsanitize=fuzzer - -o /dev/null 2>/dev/null; then
  echo "fuzz: $cxx cannot link libFuzzer: skipped"; exit 77
fi
mkdir -p "$build"
# ccache, where there is one, as for the main build: a fresh clone's fuzz build is then a cache hit.
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
# Paths inside the checkout hashed relative to it (as the main build does): another clone hits.
export CCACHE_BASEDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$here" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=None "${launcher[@]}" \
    >"$build/configure.log" 2>&1 \
    || { cat "$build/configure.log"; echo "fuzz: configure failed"; exit 1; }
fi
cmake --build "$build"
echo "fuzz: targets built in $build (PASS)"
