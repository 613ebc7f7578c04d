#!/usr/bin/env bash
# `normlab import --from hf`: tiny random Hugging Face checkpoints made with transformers in
# PYTHON (LlamaForCausalLM with GQA, sharded, and with tied embeddings; OlmoeForCausalLM with
# and without norm_topk_prob, GQA, sharded; Olmo2ForCausalLM with GQA, sharded, and with tied
# embeddings) become runs whose fp32 logits equal transformers' to 1e-4 relative, whose
# `export --format hf` loads back (trust_remote_code) with the same logits, and which fine-tune
# with `train --resume`. Options normlab cannot express (another architecture, biases,
# RoPE scaling, another activation, clip_qkv, ...) are refused naming the config.json key, a
# missing or corrupt shard names the file, and nothing the user has is overwritten.
# Usage: hf_import.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR
# Prints PASS; fails when Python cannot import transformers (tools/setup.sh --tests installs it).
set -euo pipefail
normlab=$1 src=$2 kjv=$3 python=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
"$python" -c "import transformers, safetensors" 2> /dev/null \
  || fail "$python cannot import transformers or safetensors (run tools/setup.sh --tests)"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
check=$src/tests/cli/hf_import_check.py
"$python" "$check" make "$work" > "$work/make.out" 2>&1 || { cat "$work/make.out"; fail "making the checkpoints"; }
data=(--config "$src/configs/tiny/lm.yaml" --set "data.train=$kjv/shards" --set "data.tokenizer=$kjv/tokenizer.model")

cases=(llama_gqa_sharded llama_tied olmoe olmoe_norm_topk_gqa_sharded olmo2_gqa_sharded olmo2_tied)
for c in "${cases[@]}"; do
  d=$work/$c
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

# Refusals, named; nothing written.
expect_error() {  # expect_error PATTERN HF_DIR [ARGS...]
  local pattern=$1 hf=$2; shift 2
  rc=0; "$normlab" import --from hf --checkpoint "$hf" "${data[@]}" "$@" --out "$work/bad" > "$work/err.out" 2>&1 || rc=$?
  [ "$rc" -eq 1 ] && grep -q -- "$pattern" "$work/err.out" || { cat "$work/err.out"; fail "expected '$pattern' for $hf $*"; }
  [ ! -e "$work/bad" ] || fail "$work/bad written despite the error for $hf"
}
edited() {  # edited NAME CASE PYTHON_STATEMENT: a copy of CASE's folder whose config.json `c` is edited
  local to=$work/edit/$1; rm -rf "$to"; mkdir -p "$work/edit"; cp -r "$work/$2/hf" "$to"
  "$python" -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); $3; json.dump(c, open(p, 'w'))" "$to/config.json"
  echo "$to"
}
expect_error 'architectures = \["MistralForCausalLM"\]' "$(edited mistral llama_tied 'c["architectures"]=["MistralForCausalLM"]')"
expect_error "attention_bias = true" "$(edited bias llama_tied 'c["attention_bias"]=True')"
expect_error "mlp_bias = true" "$(edited mlp_bias llama_tied 'c["mlp_bias"]=True')"
expect_error 'hidden_act = "gelu"' "$(edited act llama_tied 'c["hidden_act"]="gelu"')"
expect_error "clip_qkv = 8.0" "$(edited clip olmoe 'c["clip_qkv"]=8.0')"
expect_error 'rope_scaling = {"factor":2.0,"type":"linear"}' \
  "$(edited scaling llama_tied 'c["rope_scaling"]={"type": "linear", "factor": 2.0}')"
expect_error '"rope_type": "llama3"' "$(edited llama3 llama_tied 'c["rope_parameters"]["rope_type"]="llama3"')"
expect_error "head_dim = 32" "$(edited head_dim llama_tied 'c["head_dim"]=32')"
expect_error "max_position_embeddings = 256: data.seq_len = 512" "$work/llama_tied/hf" --set data.seq_len=512
# The older form (rope_theta at the top, rope_scaling null) imports.
legacy=$(edited legacy llama_gqa_sharded 'p_=c.pop("rope_parameters"); c["rope_theta"]=p_["rope_theta"]; c["rope_scaling"]=None')
"$normlab" import --from hf --checkpoint "$legacy" "${data[@]}" --out "$work/legacy_run" > "$work/legacy.out" 2>&1 \
  || { cat "$work/legacy.out"; fail "import of the older config.json form"; }
grep -q "rope_theta: 500000" "$work/legacy_run/config.yaml" || fail "rope_theta of the older form: $(grep rope "$work/legacy_run/config.yaml")"

# Missing and corrupt weights name the file.
shards=$(edited missing llama_gqa_sharded 'pass')
rm "$shards/model-00003-of-00007.safetensors"
expect_error "model-00003-of-00007.safetensors: no such file (listed in" "$shards"
shards=$(edited corrupt llama_gqa_sharded 'pass')
head -c 100 "$work/llama_gqa_sharded/hf/model-00002-of-00007.safetensors" > "$shards/model-00002-of-00007.safetensors"
expect_error "model-00002-of-00007.safetensors" "$shards"
single=$(edited nofile llama_tied 'pass')
rm "$single/model.safetensors"
expect_error "no model.safetensors or model.safetensors.index.json" "$single"
wrong=$(edited wrong llama_tied 'c["intermediate_size"]=128')
expect_error "shapes that differ:" "$wrong"

# Nothing the user has is overwritten: an existing run, a config.yaml the import did not write.
rc=0; "$normlab" import --from hf --checkpoint "$work/olmoe/hf" "${data[@]}" --out "$work/olmoe/run" > "$work/err.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] && grep -q "already holds checkpoints" "$work/err.out" || { cat "$work/err.out"; fail "import into a run"; }
mkdir -p "$work/mine" && echo "mine: true" > "$work/mine/config.yaml"
rc=0; "$normlab" import --from hf --checkpoint "$work/olmoe/hf" "${data[@]}" --out "$work/mine" > "$work/err.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] && grep -q "config.yaml" "$work/err.out" || { cat "$work/err.out"; fail "import over a user's config.yaml"; }
[ "$(cat "$work/mine/config.yaml")" = "mine: true" ] || fail "the user's config.yaml was changed"
echo "PASS"
