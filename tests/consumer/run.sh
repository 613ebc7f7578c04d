#!/usr/bin/env bash
# Installs the normlab build in BUILD_DIR to a scratch prefix, then configures, builds and runs
# the consumer project against it with find_package(normlab): a DecoderLM from the installed
# headers, a forward pass and one AdamW step (main.cpp).
# A decoy libtorch (Torch and Caffe2 CMake packages that stop the configure if they are read,
# as a distro's libtorch-dev would be found) sits on CMAKE_PREFIX_PATH: the installed
# normlab-config.cmake must pin torch's packages to the LibTorch normlab was built with, so the
# consumer's Torch_DIR and Caffe2_DIR must be the build's.
# Usage: run.sh BUILD_DIR WORK_DIR
set -euo pipefail
build=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
for pkg in Torch Caffe2; do
  mkdir -p "$work/decoy/lib/cmake/$pkg"
  echo "message(FATAL_ERROR \"decoy $pkg package picked up: \${CMAKE_CURRENT_LIST_FILE}\")" \
    > "$work/decoy/lib/cmake/$pkg/${pkg}Config.cmake"
done
cmake -S "$here" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      "-DCMAKE_PREFIX_PATH=$work/decoy;$work/prefix" >"$work/configure.log" 2>&1 \
  || { cat "$work/configure.log"; fail "the consumer project does not configure"; }
for var in Torch_DIR Caffe2_DIR; do
  want=$(grep "^$var:" "$build/CMakeCache.txt" | cut -d= -f2- || true)
  got=$(grep "^$var:" "$work/build/CMakeCache.txt" | cut -d= -f2- || true)
  [ -n "$want" ] || fail "$build/CMakeCache.txt has no $var"
  [ "$(realpath -m "$got")" = "$(realpath -m "$want")" ] \
    || fail "the consumer resolved $var=$got, not normlab's $want"
done
cmake --build "$work/build"
out=$("$work/build/consumer")
echo "$out"
grep -q "^consumer: normlab .* with LibTorch .*: siamese_hybrid, [0-9]* parameter tensors, loss .* 0 unchanged$" <<<"$out" \
  || fail "unexpected output"
echo "consumer: Torch_DIR and Caffe2_DIR pinned to $(grep '^Torch_DIR:' "$build/CMakeCache.txt" | cut -d= -f2- | sed 's|/Torch$||')"
echo PASS
