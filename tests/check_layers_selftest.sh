#!/usr/bin/env bash
# The layering check can fail: copies the tracked library and unit-test files into a scratch
# tree, checks that it passes there, then adds one include of each kind the kernels rules
# forbid and checks that tests/check_layers.py names exactly those four. CTest `layers_selftest`.
# Usage: tests/check_layers_selftest.sh REPO_ROOT [PYTHON]
set -euo pipefail
repo=$(cd "${1:?usage: check_layers_selftest.sh REPO_ROOT [PYTHON]}" && pwd)
py=${2:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$repo" && git ls-files include src tests/unit | tar -cf - -T -) | tar -xf - -C "$tmp"
"$py" "$repo/tests/check_layers.py" "$tmp" > "$tmp/clean.out" || { cat "$tmp/clean.out"; echo "layers_selftest: FAIL (the copied tree does not pass)"; exit 1; }
echo '#include "normlab/kernels/capabilities.h"' >> "$tmp/src/nn/mlp.cpp"        # nn: ops.h only
echo '#include "kernels/cpu/isa.h"' >> "$tmp/src/train/trainer.cpp"            # a private header
echo '#include "normlab/nn/model.h"' >> "$tmp/src/kernels/cpu/rope.cpp"         # kernels going up
echo '#include "kernels/cpu/blas.h"' >> "$tmp/tests/unit/nn/test_loss.cpp"      # a test outside the wing
set +e
"$py" "$repo/tests/check_layers.py" "$tmp" > "$tmp/bad.out"
rc=$?
set -e
want=("src/nn/mlp.cpp:.*nn reaches the kernels through include/normlab/kernels/ops.h only"
      "src/train/trainer.cpp:.*a private header of the kernels wing"
      "src/kernels/cpu/rope.cpp:.*kernels includes nn"
      "tests/unit/nn/test_loss.cpp:.*outside tests/unit/kernels/ includes a private kernels header"
      "layers: FAIL \(4 problems")
ok=1
[ $rc -eq 1 ] || { echo "layers_selftest: the check exited $rc, not 1"; ok=0; }
for w in "${want[@]}"; do grep -Eq "$w" "$tmp/bad.out" || { echo "layers_selftest: missing: $w"; ok=0; }; done
if ((ok)); then echo "layers_selftest: PASS"; else cat "$tmp/bad.out"; exit 1; fi
