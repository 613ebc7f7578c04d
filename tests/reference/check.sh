#!/usr/bin/env bash
# CTest's checks of the PyTorch reference and its golden files (tests/CMakeLists.txt):
#   check.sh regenerate SOURCE_DIR WORK_DIR [PYTHON]   make_goldens.py into WORK_DIR/golden,
#                                                     then compare_goldens.py against
#                                                     tests/data/golden: the same files and
#                                                     tensors, values within the bounds it derives
#   check.sh mutant SOURCE_DIR WORK_DIR [PYTHON]       the same with LayerNorm's eps changed in a
#                                                     copy of the reference (by +1e-3, then by a
#                                                     factor 1 + 1e-3): every LayerNorm golden
#                                                     must fail by orders of magnitude
#   check.sh self_check SOURCE_DIR WORK_DIR [PYTHON]   self_check.py on tests/data/golden
#   check.sh moe_regenerate SOURCE_DIR WORK_DIR [PYTHON]  moe_ref.py into WORK_DIR/golden_moe,
#                                                     compared with tests/data/golden_moe
#   check.sh moe_mutant SOURCE_DIR WORK_DIR [PYTHON]   the same with the load-balancing loss's
#                                                     factor E changed to E + 1e-3 in a copy of
#                                                     moe_ref.py: every file must fail by orders
#                                                     of magnitude
# Fails when PYTHON is absent or lacks torch, numpy or safetensors (tools/setup.sh installs them
# into the venv); prints PASS.
set -uo pipefail
mode=${1:-} src=${2:-} work=${3:-} python=${4:-}
if [ -z "$mode" ] || [ -z "$src" ] || [ -z "$work" ]; then
  echo "usage: check.sh regenerate|mutant|self_check|moe_regenerate|moe_mutant SOURCE_DIR WORK_DIR [PYTHON]" >&2
  exit 2
fi
if [ -z "$python" ] || ! "$python" -c "import torch, numpy, safetensors" >/dev/null 2>&1; then
  echo "FAIL: no python with torch, numpy and safetensors ('$python'): run tools/setup.sh"
  exit 1
fi
golden=$src/tests/data/golden
case $mode in
  regenerate)
    rm -rf "$work" && mkdir -p "$work/golden" || exit 1
    "$python" "$src/tests/reference/make_goldens.py" --out "$work/golden" >"$work/make_goldens.log" 2>&1 \
      || { cat "$work/make_goldens.log"; echo "FAIL: make_goldens.py failed"; exit 1; }
    "$python" "$src/tests/reference/compare_goldens.py" "$work/golden" "$golden" \
      || { echo "FAIL: (after an intended change, regenerate with: python tests/reference/make_goldens.py --out tests/data/golden)"; exit 1; }
    echo "golden regenerate: $(ls "$golden" | wc -l) files within bounds: PASS"
    ;;
  mutant)
    # A copy of the reference with LayerNorm's eps changed (each mutation in turn, in
    # blocks_ref.py, the reference's norms); the LayerNorm cases only.
    rm -rf "$work" && mkdir -p "$work" || exit 1
    for mutation in "eps + 1e-3" "eps * (1 + 1e-3)"; do
      ref=$work/ref && rm -rf "$ref" "$work/golden" && mkdir -p "$ref" "$work/golden" && cp "$src"/tests/reference/*.py "$ref/"
      "$python" - "$ref/blocks_ref.py" "$mutation" <<'PY' || exit 1
import sys
path, mutation = sys.argv[1], sys.argv[2]
text = open(path).read()
line = "y = (xc - mean) / torch.sqrt(var + eps)"
if text.count(line) != 1:
    sys.exit(f"FAIL: the mutation site '{line}' is not in blocks_ref.py once")
open(path, "w").write(text.replace(line, f"y = (xc - mean) / torch.sqrt(var + ({mutation}))"))
PY
      "$python" "$ref/make_goldens.py" --out "$work/golden" --cases '*layernorm*' >"$work/make_goldens.log" 2>&1 \
        || { cat "$work/make_goldens.log"; echo "FAIL: make_goldens.py failed"; exit 1; }
      echo -n "LayerNorm eps -> $mutation: "
      "$python" "$ref/compare_goldens.py" "$work/golden" "$golden" --expect-fail 1e3 \
        || { echo "FAIL: the mutant is not caught by orders of magnitude"; exit 1; }
    done
    echo "golden mutant: caught: PASS"
    ;;
  self_check)
    mkdir -p "$work" || exit 1
    "$python" "$src/tests/reference/self_check.py" --golden "$golden" >"$work/self_check.log" 2>&1
    rc=$?
    grep -v '^\[PASS\]' "$work/self_check.log"
    [ $rc -eq 0 ] || { echo "FAIL: self_check.py exited $rc (full log: $work/self_check.log)"; exit 1; }
    echo "reference self check: $(grep -c '^\[PASS\]' "$work/self_check.log") checks: PASS"
    ;;
  moe_regenerate)
    rm -rf "$work" && mkdir -p "$work/golden_moe" || exit 1
    "$python" "$src/tests/reference/moe_ref.py" --out "$work/golden_moe" >"$work/moe_ref.log" 2>&1 \
      || { cat "$work/moe_ref.log"; echo "FAIL: moe_ref.py failed"; exit 1; }
    "$python" "$src/tests/reference/compare_goldens.py" "$work/golden_moe" "$src/tests/data/golden_moe" \
      || { echo "FAIL: (after an intended change, regenerate with: python tests/reference/moe_ref.py --out tests/data/golden_moe)"; exit 1; }
    echo "golden moe regenerate: $(ls "$src/tests/data/golden_moe" | wc -l) files within bounds: PASS"
    ;;
  moe_mutant)
    rm -rf "$work" && mkdir -p "$work/ref" "$work/golden_moe" && cp "$src"/tests/reference/*.py "$work/ref/" || exit 1
    "$python" - "$work/ref/moe_ref.py" <<'PY' || exit 1
import sys
path = sys.argv[1]
text = open(path).read()
line = "lb = E * (f * p.mean(dim=0)).sum()"
if text.count(line) != 1:
    sys.exit(f"FAIL: the mutation site '{line}' is not in moe_ref.py once")
open(path, "w").write(text.replace(line, "lb = (E + 1e-3) * (f * p.mean(dim=0)).sum()"))
PY
    "$python" "$work/ref/moe_ref.py" --out "$work/golden_moe" >"$work/moe_ref.log" 2>&1 \
      || { cat "$work/moe_ref.log"; echo "FAIL: moe_ref.py failed"; exit 1; }
    echo -n "load balance E -> E + 1e-3: "
    "$python" "$work/ref/compare_goldens.py" "$work/golden_moe" "$src/tests/data/golden_moe" --expect-fail 1e3 \
      || { echo "FAIL: the mutant is not caught by orders of magnitude"; exit 1; }
    echo "golden moe mutant: caught: PASS"
    ;;
  *) echo "check.sh: unknown mode '$mode'" >&2; exit 2 ;;
esac
