#!/usr/bin/env bash
# Hugging Face tokenizer.json files (docs/data.md, "Hugging Face tokenizers"): GPT-NeoX-style and
# Llama-3-style byte-level BPEs trained by the `tokenizers` library on the built-in corpus give,
# through `normlab tokenizer encode`, `decode` and `data prepare`, exactly that library's ids
# and texts; a model trained with one exports (--format hf) a tokenizer that transformers'
# AutoTokenizer loads and encodes alike; WordPiece, Unigram and malformed files are refused in
# one line naming the file (tests/cli/hf_tokenizer_check.py). About 40 s. Fails without
# tokenizers, transformers or numpy (tools/setup.sh --tests installs them).
# Usage: hf_tokenizer.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR
set -euo pipefail
normlab=$1 src=$2 corpus=$3 python=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
"$python" "$src/tests/cli/hf_tokenizer_check.py" "$normlab" "$corpus/corpus.txt" "$work"
