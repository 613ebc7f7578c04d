#!/usr/bin/env bash
# Builds the unit tests with AddressSanitizer and UndefinedBehaviorSanitizer (GCC) in
# build-asan/ and runs them: any report (heap/stack overflow, use after free, leak in our code,
# signed overflow, misaligned or null access, ...) fails the run. docs/reliability.md.
# Usage: tools/sanitize.sh [extra ctest arguments...]
# Env:   NORMLAB_ASAN_BUILD_DIR (default: <repo>/build-asan), NORMLAB_JOBS
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${NORMLAB_ASAN_BUILD_DIR:-$root/build-asan}

t0=$(date +%s)
"$root/tools/setup.sh"
if [ ! -f "$build/build.ninja" ]; then
  mkdir -p "$build"
  # -O1 with asserts on (no NDEBUG); no own CUDA kernels (nvcc does not take these flags), no CLI.
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
        -DNORMLAB_SANITIZE=address,undefined -DNORMLAB_CUDA=OFF -DNORMLAB_BUILD_TOOLS=OFF \
        >"$build/configure.log" 2>&1 \
    || { cat "$build/configure.log" >&2; echo "sanitize: CMake configure failed" >&2; exit 1; }
fi
cmake --build "$build" --target normlab_unit_tests normlab_fuzz_replay ${NORMLAB_JOBS:+-j "$NORMLAB_JOBS"}
t1=$(date +%s)

# LibTorch is not instrumented, but ASan intercepts every allocation, so its buffers overflowed
# by our code are still caught; LeakSanitizer checks at exit. The first report stops the test.
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:strict_string_checks=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" -L '^unit$' "$@" || status=$?
t2=$(date +%s)
echo "sanitize: build $((t1 - t0)) s, tests $((t2 - t1)) s, exit $status"
exit $status
