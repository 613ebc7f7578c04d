#!/usr/bin/env bash
# Diagnostics as a user runs them, on the built-in corpus fixture (CTest label slow): a short
# training run with diagnostics on writes diagnostics.jsonl and the plots; `normlab analyze`
# gives the same numbers from the run folder and from its export; bad input is named.
# Usage: analyze.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR
set -euo pipefail
normlab=$1 src=$2 kjv=$3 python=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
export NORMLAB_PYTHON=$python
fail() { echo "FAIL: $*"; exit 1; }
# matplotlib is part of the setup (tools/setup.sh): without it the plots are not checked and
# the test says so by failing.
"$python" -c "import matplotlib" 2>/dev/null || { echo "FAIL: $python has no matplotlib (run tools/setup.sh)"; exit 1; }
plots=1

"$normlab" train --config "$src/configs/tiny/lm.yaml" --set "data.train=$kjv/shards" \
  --set "data.tokenizer=$kjv/tokenizer.model" --set train.steps=20 --set diagnostics.every=10 \
  --set diagnostics.pruning=true --out "$work/run" > "$work/train.out" 2>&1 || { cat "$work/train.out"; fail "train"; }
[ "$(wc -l < "$work/run/diagnostics.jsonl")" -eq 2 ] || fail "expected diagnostics at steps 10 and 20"
[ "$plots" = 0 ] || for p in stream_norms grad_norms gains logit_lens pruning; do
  [ -s "$work/run/$p.png" ] || fail "no $p.png in the run folder"
done

"$normlab" analyze --checkpoint "$work/run" --data "$kjv/shards" --out "$work/a1" > "$work/a1.out" 2>&1 \
  || { cat "$work/a1.out"; fail "analyze run folder"; }
grep -Eq '^ +entry +[0-9.e+-]+ +[0-9.e+-]+' "$work/a1.out" || { cat "$work/a1.out"; fail "no per-layer table"; }
grep -q "final fusion gains: x" "$work/a1.out" || fail "no final fusion gains for siamese_hybrid"
"$normlab" export --checkpoint "$work/run" --out "$work/export" > /dev/null
"$normlab" analyze --checkpoint "$work/export" --data "$kjv/shards" --seq-len 64 --out "$work/a2" --no-plots \
  > "$work/a2.out" 2>&1 || { cat "$work/a2.out"; fail "analyze export folder"; }
cmp "$work/a1/diagnostics.jsonl" "$work/a2/diagnostics.jsonl" || fail "run folder and export disagree"
[ "$plots" = 0 ] || [ -s "$work/a1/pruning.png" ] || fail "analyze drew no plots"

rc=0; "$normlab" analyze --checkpoint "$work/run" --data "$work/nowhere" --out "$work/a3" > "$work/a3.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] && grep -q "nowhere" "$work/a3.out" || { cat "$work/a3.out"; fail "a missing data folder is not named"; }
rc=0; "$normlab" analyze --checkpoint "$work/run" --data "$kjv/shards" --split test --out "$work/a3" > "$work/a3.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] && grep -q "no split 'test'" "$work/a3.out" || { cat "$work/a3.out"; fail "a bad split is not named"; }
rc=0; "$normlab" analyze --checkpoint "$work/nothing" --data "$kjv/shards" --out "$work/a3" > "$work/a3.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] && grep -q "nothing: neither a checkpoint folder nor a run folder" "$work/a3.out" \
  || { cat "$work/a3.out"; fail "a bad checkpoint is not named"; }
echo "diagnostics in training: 2 lines; analyze: run folder = export; bad input named"
echo "PASS"
