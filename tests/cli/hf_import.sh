#!/usr/bin/env bash
# `normlab import --from hf`: tiny random Hugging Face checkpoints made with transformers
# (LlamaForCausalLM with GQA, sharded, and with tied embeddings; OlmoeForCausalLM with and
# without norm_topk_prob, GQA, sharded; Olmo2ForCausalLM with GQA, sharded, and with tied
# embeddings; the hf_import_checkpoints test makes them) become runs whose fp32 logits equal
# transformers' to 1e-4 relative, whose `export --format hf` loads back (trust_remote_code) with
# the same logits, and which fine-tune with `train --resume`. The config.json forms normlab
# refuses or reads, bad checkpoints and the user's files: hf_import_configs.sh, which computes
# nothing that the CPU's kernels could change (this test has the label kernels, that one not).
# Usage: hf_import.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR
# Prints PASS; fails when Python has no transformers (tools/setup.sh --tests installs it).
set -euo pipefail
normlab=$1 src=$2 kjv=$3 python=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
source "$(dirname "${BASH_SOURCE[0]}")/python_modules.sh"
require_python_modules "$python" transformers safetensors
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
check=$src/tests/cli/hf_import_check.py
checkpoints=$(dirname "$work")/hf_import_checkpoints
[ -f "$checkpoints/olmoe/hf/config.json" ] || fail "no checkpoints in $checkpoints (the hf_import_checkpoints test makes them)"
data=(--config "$src/configs/tiny/lm.yaml" --set "data.train=$kjv/shards" --set "data.tokenizer=$kjv/tokenizer.model")

cases=(llama_gqa_sharded llama_tied olmoe olmoe_norm_topk_gqa_sharded olmo2_gqa_sharded olmo2_tied)
for c in "${cases[@]}"; do
  d=$work/$c
  mkdir -p "$d" && ln -s "$checkpoints/$c/hf" "$d/hf"
  "$normlab" import --from hf --checkpoint "$d/hf" "${data[@]}" --out "$d/run" > "$d/import.out" 2>&1 \
    || { cat "$d/import.out"; fail "import $c"; }
  "$normlab" generate --checkpoint "$d/run" --prompt "And God said unto Moses, " --max-tokens 1 \
    --temperature 0 --logits-out "$d/normlab.safetensors" > /dev/null || fail "generate $c"
  "$normlab" export --format hf --checkpoint "$d/run" --out "$d/export" > /dev/null || fail "export $c"
done
grep -q "scheme: pre_norm" "$work/olmoe/run/config.yaml" && grep -q "qk_norm: full" "$work/olmoe/run/config.yaml" \
  && grep -q "n_experts: 4" "$work/olmoe/run/config.yaml" || fail "the OLMoE run's config: $(cat "$work/olmoe/run/config.yaml")"
grep -q "tie_embeddings: true" "$work/llama_tied/run/config.yaml" || fail "the tied Llama run is not tied"
o2=$work/olmo2_gqa_sharded/run/config.yaml
grep -q "scheme: reordered_norm" "$o2" && grep -q "qk_norm: full" "$o2" && grep -q "n_experts: 0" "$o2" \
  && grep -q "norm_eps: 1e-05" "$o2" || fail "the OLMo-2 run's config: $(cat "$o2")"
grep -q "norm_eps: 1e-06" "$work/olmo2_tied/run/config.yaml" || fail "the tied OLMo-2 run's eps"
[ "$(ls "$work/olmo2_gqa_sharded/hf"/model-*.safetensors | wc -l)" -gt 1 ] || fail "the OLMo-2 checkpoint is not sharded"
"$python" "$check" check "$work" "${cases[@]}" || fail "the imports disagree with transformers"

# The imported run fine-tunes from the import, with its own config.yaml (the model is
# config.json's, not the YAML's).
"$normlab" train --config "$work/olmoe/run/config.yaml" --out "$work/olmoe/run" --resume --set train.steps=2 > "$work/tune.out" 2>&1 \
  || { cat "$work/tune.out"; fail "fine-tuning the imported run with --resume"; }
grep -q "resumed from .*step-00000000 at step 0" "$work/tune.out" || fail "the fine-tuning did not start from the import"

echo "PASS"
