#!/usr/bin/env bash
# CTest's checks of the PyTorch reference and its golden files (tests/CMakeLists.txt):
#   check.sh regenerate SOURCE_DIR WORK_DIR [PYTHON]   make_goldens.py into WORK_DIR/golden,
#                                                     then the same file names as
#                                                     tests/data/golden and each file identical
#                                                     byte for byte (cmp)
#   check.sh self_check SOURCE_DIR WORK_DIR [PYTHON]   self_check.py on tests/data/golden
# Exits 77 (Skipped) when PYTHON is absent or lacks torch, numpy or safetensors; prints PASS.
set -uo pipefail
mode=${1:-} src=${2:-} work=${3:-} python=${4:-}
if [ -z "$mode" ] || [ -z "$src" ] || [ -z "$work" ]; then
  echo "usage: check.sh regenerate|self_check SOURCE_DIR WORK_DIR [PYTHON]" >&2
  exit 2
fi
if [ -z "$python" ] || ! "$python" -c "import torch, numpy, safetensors" >/dev/null 2>&1; then
  echo "SKIP: no python with torch, numpy and safetensors ('$python')"
  exit 77
fi
golden=$src/tests/data/golden
case $mode in
  regenerate)
    rm -rf "$work" && mkdir -p "$work/golden" || exit 1
    "$python" "$src/tests/reference/make_goldens.py" --out "$work/golden" >"$work/make_goldens.log" 2>&1 \
      || { cat "$work/make_goldens.log"; echo "FAIL: make_goldens.py failed"; exit 1; }
    fail=0
    made=$(cd "$work/golden" && ls -- *.safetensors | sort)
    committed=$(cd "$golden" && ls -- *.safetensors | sort)
    if [ "$made" != "$committed" ]; then
      echo "FAIL: the files differ in name from tests/data/golden:"
      diff <(echo "$committed") <(echo "$made") | sed -n 's/^[<>]/  &/p'
      fail=1
    fi
    n=0
    for f in $made; do
      [ -f "$golden/$f" ] || continue
      n=$((n + 1))
      cmp -s "$work/golden/$f" "$golden/$f" || { echo "FAIL: $f differs from tests/data/golden/$f"; fail=1; }
    done
    [ $fail -eq 0 ] || { echo "(regenerate with: python tests/reference/make_goldens.py --out tests/data/golden)"; exit 1; }
    echo "golden regenerate: $n files byte-identical: PASS"
    ;;
  self_check)
    mkdir -p "$work" || exit 1
    "$python" "$src/tests/reference/self_check.py" --golden "$golden" >"$work/self_check.log" 2>&1
    rc=$?
    grep -v '^\[PASS\]' "$work/self_check.log"
    [ $rc -eq 0 ] || { echo "FAIL: self_check.py exited $rc (full log: $work/self_check.log)"; exit 1; }
    echo "reference self check: $(grep -c '^\[PASS\]' "$work/self_check.log") checks: PASS"
    ;;
  *) echo "check.sh: unknown mode '$mode'" >&2; exit 2 ;;
esac
