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
cmake --build "$build" --target normlab_unit_tests ${NORMLAB_JOBS:+-j "$NORMLAB_JOBS"}
t1=$(date +%s)

# LibTorch and its OpenMP runtime are not instrumented; what they allocate once and keep until
# exit is reported as leaks by LeakSanitizer, so leaks inside them are suppressed (the file
# names each library). Everything else stops the test at the first report.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:halt_on_error=1:detect_stack_use_after_return=0:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/tools/sanitize.supp:print_suppressions=0}
status=0
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" -L '^unit$' "$@" || status=$?
t2=$(date +%s)
echo "sanitize: build $((t1 - t0)) s, tests $((t2 - t1)) s, exit $status"
exit $status
