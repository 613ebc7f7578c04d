#!/usr/bin/env bash
# Installs the normlab build in BUILD_DIR to a scratch prefix, then configures, builds and runs
# the consumer project against it with find_package(normlab).
# Usage: run.sh BUILD_DIR WORK_DIR
set -euo pipefail
build=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$here" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/configure.log" 2>&1 \
  || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build"
out=$("$work/build/consumer")
echo "$out"
grep -q "^consumer: normlab .* with LibTorch .*, sum 4$" <<<"$out"
