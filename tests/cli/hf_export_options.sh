#!/usr/bin/env bash
# `normlab export` with the options and errors of --format, on a tiny SiameseNorm model trained
# 10 steps on the built-in corpus: the exported tokenizer, loaded by transformers' AutoTokenizer,
# encodes texts (spaces, tabs, ligatures, emoji) as `normlab tokenizer encode` does; --format
# normlab is the plain export; a plain export converts to the same HF weights and tokenizer; a
# bad --format, --tokenizer without --format hf and a missing tokenizer are named, and nothing is
# written. It compares ids, bytes and messages only (label slow, not kernels); the logits of the
# exports: hf_export.sh.
# Usage: hf_export_options.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR
# Prints PASS; fails when Python has no transformers (tools/setup.sh --tests installs it).
set -euo pipefail
normlab=$1 src=$2 kjv=$3 python=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
"$normlab" train --config "$src/configs/tiny/lm.yaml" --set "data.train=$kjv/shards" \
  --set "data.tokenizer=$kjv/tokenizer.model" --set model.scheme=siamese --set train.steps=10 \
  --set eval.every=0 --set eval.batches=1 --out "$work/run" > "$work/train.out" 2>&1 \
  || { cat "$work/train.out"; fail "train"; }
"$normlab" export --format hf --checkpoint "$work/run" --out "$work/hf" > /dev/null || fail "export --format hf"

# The tokenizer encodes like `normlab tokenizer encode` (add_special_tokens=False; by default
# it puts EOS first, as normlab does before prompts and task items).
texts=("In the beginning God created the heaven and the earth." "double  space, tab	and ﬁ ligature"
       "  leading and trailing  " "Calculate 14 + 16 = 30" "émoji 😀 ünïcödé")
for t in "${texts[@]}"; do
  "$normlab" tokenizer encode --tokenizer "$kjv/tokenizer.model" --text "$t"
done > "$work/encode_normlab.txt"
# Without trust_remote_code (transformers asks about the model's code on stdout, then falls back).
source "$(dirname "${BASH_SOURCE[0]}")/python_modules.sh"
require_python_modules "$python" transformers sentencepiece
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$python" - "$work/hf" "$work/encode_hf.txt" "${texts[@]}" > /dev/null 2>&1 <<'EOF'
import sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
with open(sys.argv[2], "w") as out:
    for t in sys.argv[3:]:
        print(" ".join(map(str, tok(t, add_special_tokens=False)["input_ids"])), file=out)
EOF
diff "$work/encode_normlab.txt" "$work/encode_hf.txt" || fail "the HF tokenizer encodes differently"
echo "tokenizer: ${#texts[@]} texts encode as normlab does"

# --format normlab is the plain export; a bad format is named.
"$normlab" export --checkpoint "$work/run" --out "$work/plain1" > /dev/null
"$normlab" export --format normlab --checkpoint "$work/run" --out "$work/plain2" > /dev/null
cmp "$work/plain1/model.safetensors" "$work/plain2/model.safetensors" || fail "--format normlab differs"
grep -q '"format": "normlab"' "$work/plain2/config.json" || fail "--format normlab: not a normlab export"
# A plain export converts too, to the same weights and tokenizer.
"$normlab" export --format hf --checkpoint "$work/plain1" --out "$work/hf_of_plain" > /dev/null
cmp "$work/hf_of_plain/model.safetensors" "$work/hf/model.safetensors" || fail "HF export of an export differs"
cmp "$work/hf_of_plain/tokenizer.model" "$work/hf/tokenizer.model" || fail "HF export of an export: tokenizer"
rc=0; "$normlab" export --format onnx --checkpoint "$work/run" --out "$work/bad" > "$work/bad.out" 2>&1 || rc=$?
[ $rc -ne 0 ] && grep -q "onnx" "$work/bad.out" || { cat "$work/bad.out"; fail "a bad --format is not named"; }
rc=0; "$normlab" export --checkpoint "$work/run" --out "$work/bad" --tokenizer "$kjv/tokenizer.model" \
  > "$work/bad.out" 2>&1 || rc=$?
[ $rc -eq 1 ] && grep -q "\-\-tokenizer goes with --format hf" "$work/bad.out" || { cat "$work/bad.out"; fail "--tokenizer without hf"; }
rc=0; "$normlab" export --format hf --checkpoint "$work/run" --out "$work/bad" --tokenizer "$work/none.model" \
  > "$work/bad.out" 2>&1 || rc=$?
[ $rc -eq 1 ] && grep -q "none.model: tokenizer not found" "$work/bad.out" || { cat "$work/bad.out"; fail "a missing tokenizer not named"; }
[ ! -e "$work/bad" ] || fail "an export was written despite the errors"
echo "PASS"
