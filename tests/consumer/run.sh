#!/usr/bin/env bash
# Installs the normlab build in BUILD_DIR to a scratch prefix, then configures, builds and runs
# the consumer project against it with find_package(normlab): a DecoderLM from the installed
# headers, a forward pass and one AdamW step (main.cpp).
# A decoy libtorch (Torch and Caffe2 CMake packages that stop the configure if they are read,
# as a distro's libtorch-dev would be found) sits on CMAKE_PREFIX_PATH: the installed
# normlab-config.cmake must pin torch's packages to the LibTorch normlab was built with, so the
# consumer's Torch_DIR and Caffe2_DIR must be the build's.
# Then the consumer's GoogleTest on the installed equivalence header (equivalence_test.cpp:
# hyper with one static stream == pre_norm), and the installed `normlab compare` on the same
# pair and map, which must print the same table.
# Usage: run.sh BUILD_DIR WORK_DIR
set -euo pipefail
build=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
for pkg in Torch Caffe2; do
  mkdir -p "$work/decoy/lib/cmake/$pkg"
  echo "message(FATAL_ERROR \"decoy $pkg package picked up: \${CMAKE_CURRENT_LIST_FILE}\")" \
    > "$work/decoy/lib/cmake/$pkg/${pkg}Config.cmake"
done
# ccache, where there is one: the compile is the same as a consumer's, only cached.
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
# Paths inside the checkout hashed relative to it (as the main build does): another clone hits.
export CCACHE_BASEDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cmake -S "$here" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
      "-DCMAKE_PREFIX_PATH=$work/decoy;$work/prefix" "-DCONSUMER_CONFIGS_DIR=$src/configs" >"$work/configure.log" 2>&1 \
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

"$work/build/consumer_equivalence" > "$work/gtest.out" 2>&1 || { cat "$work/gtest.out"; fail "the consumer's equivalence test"; }
grep -q "^\[  PASSED  \] 2 tests" "$work/gtest.out" || { cat "$work/gtest.out"; fail "the equivalence test did not run its 2 tests"; }
"$work/prefix/bin/normlab" compare --config "$src/configs/tiny/hyper_dhc2.yaml" \
    --set model.hyper.n=1 --set model.hyper.dynamic=false \
    --against "$src/configs/tiny/lm.yaml" --set-against model.scheme=pre_norm \
    --map "$src/configs/maps/hyper_vs_pre_norm.map" --max-rel 1e-10 > "$work/compare.out" 2>&1 \
  || { cat "$work/compare.out"; fail "normlab compare"; }
# The report's table: from its "A = ..." line to the last "held" line, in both outputs.
table() { sed -n '/^A = /,/^held in /p' "$1"; }
[ -n "$(table "$work/compare.out")" ] || { cat "$work/compare.out"; fail "no table from normlab compare"; }
diff <(table "$work/gtest.out") <(table "$work/compare.out") > "$work/table.diff" \
  || { cat "$work/table.diff"; fail "normlab compare prints another table than the GoogleTest's report"; }
grep "^worst: " "$work/compare.out" | sed 's/^/consumer: hyper n = 1 vs pre_norm, gtest and normlab compare: /'
grep -q "^EQUIVALENT: " "$work/compare.out" || fail "normlab compare: not EQUIVALENT at 1e-10"
echo "consumer: Torch_DIR and Caffe2_DIR pinned to $(grep '^Torch_DIR:' "$build/CMakeCache.txt" | cut -d= -f2- | sed 's|/Torch$||')"
echo PASS
