#!/usr/bin/env bash
# Builds normlab on a CUDA machine where a Python torch installation provides LibTorch and the
# other dependencies come from a prefix made by tools/gpu/pack_deps.sh, then runs the tests
# (the gpu label by default). Needs: python3 with torch, nvcc, cmake, ninja, g++.
# Usage: tools/gpu/build_and_test.sh [--deps DIR] [--python PY] [--build DIR] [--no-test] [-- ctest args]
#   defaults: --deps <repo>/deps, --python python3, --build <repo>/build-gpu, ctest -L gpu
#   --no-test  build only what a GPU session runs (the CLI, the GPU tests, the kernel
#              benchmark) and run no tests (tools/gpu/session.sh without a pack)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
deps=$root/deps python=python3 build=$root/build-gpu test=1
ctest_args=(-L gpu)
while [ $# -gt 0 ]; do
  case $1 in
    --deps) deps=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --no-test) test=0; shift ;;
    --) shift; ctest_args=("$@"); break ;;
    *) echo "build_and_test: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ -d "$deps/usr" ] || { echo "build_and_test: no dependency prefix at $deps (make it with tools/gpu/pack_deps.sh)" >&2; exit 1; }
"$python" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'devices', torch.cuda.device_count())"
prefix=$(cd "$deps/usr" && pwd)

t0=$(date +%s)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DNORMLAB_PYTHON="$(command -v "$python")" -DCMAKE_PREFIX_PATH="$prefix" \
      -DNORMLAB_CUDA=ON
if ((test)); then
  cmake --build "$build"
else
  cmake --build "$build" --target normlab-cli normlab_gpu_tests normlab-bench-kernels
fi
t1=$(date +%s)
"$build/tools/normlab" version
((test)) || { echo "build_and_test: build $((t1 - t0)) s"; exit 0; }
status=0
ctest --test-dir "$build" --output-on-failure "${ctest_args[@]}" || status=$?
t2=$(date +%s)
echo "build_and_test: build $((t1 - t0)) s, tests $((t2 - t1)) s, exit $status"
exit $status
