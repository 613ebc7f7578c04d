#!/usr/bin/env bash
# The tiny Hugging Face checkpoints of the import tests: tests/cli/hf_import_check.py make writes
# WORK_DIR/<case>/hf with transformers (random weights, nothing downloaded). The CTest fixture
# hf_checkpoints of cli_import_hf and cli_import_hf_configs, which only read them.
# Usage: hf_import_checkpoints.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR
# Prints PASS; fails when Python has no transformers (tools/setup.sh --tests installs it).
set -euo pipefail
src=$2 python=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
source "$(dirname "${BASH_SOURCE[0]}")/python_modules.sh"
require_python_modules "$python" transformers safetensors
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
"$python" "$src/tests/cli/hf_import_check.py" make "$work" > "$work/make.out" 2>&1 \
  || { cat "$work/make.out"; echo "FAIL: making the checkpoints"; exit 1; }
echo "PASS: $(ls "$work"/*/hf/config.json | wc -l) checkpoints in $work"
