#!/usr/bin/env bash
# `normlab import --from hf` on config.json forms and checkpoints it must refuse or read, with the
# tiny Hugging Face checkpoints of the hf_import_checkpoints test (copied, then edited): options
# normlab cannot express (another architecture, biases, RoPE scaling, another activation,
# clip_qkv, another head_dim, a sequence past max_position_embeddings) are refused naming the
# config.json key; the older form of the RoPE keys (rope_theta, rope_scaling) is read; a missing
# or corrupt shard and a missing weights file name the file; a NaN in a weight names the tensor and
# its index; shapes that differ are refused;
# nothing is written on a refusal and nothing the user has is overwritten. The logits of the
# imports: hf_import.sh.
# Usage: hf_import_configs.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR
set -euo pipefail
normlab=$1 src=$2 kjv=$3 python=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
checkpoints=$(dirname "$work")/hf_import_checkpoints
[ -f "$checkpoints/olmoe/hf/config.json" ] || fail "no checkpoints in $checkpoints (the hf_import_checkpoints test makes them)"
data=(--config "$src/configs/tiny/lm.yaml" --set "data.train=$kjv/shards" --set "data.tokenizer=$kjv/tokenizer.model")

# Refusals, named; nothing written.
expect_error() {  # expect_error PATTERN HF_DIR [ARGS...]
  local pattern=$1 hf=$2; shift 2
  rc=0; "$normlab" import --from hf --checkpoint "$hf" "${data[@]}" "$@" --out "$work/bad" > "$work/err.out" 2>&1 || rc=$?
  [ "$rc" -eq 1 ] && grep -q -- "$pattern" "$work/err.out" || { cat "$work/err.out"; fail "expected '$pattern' for $hf $*"; }
  [ ! -e "$work/bad" ] || fail "$work/bad written despite the error for $hf"
}
edited() {  # edited NAME CASE PYTHON_STATEMENT: a copy of CASE's folder whose config.json `c` is edited
  local to=$work/edit/$1; rm -rf "$to"; mkdir -p "$work/edit"; cp -r "$checkpoints/$2/hf" "$to"
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
expect_error "max_position_embeddings = 256: data.seq_len = 512" "$checkpoints/llama_tied/hf" --set data.seq_len=512
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
head -c 100 "$checkpoints/llama_gqa_sharded/hf/model-00002-of-00007.safetensors" > "$shards/model-00002-of-00007.safetensors"
expect_error "model-00002-of-00007.safetensors" "$shards"
single=$(edited nofile llama_tied 'pass')
rm "$single/model.safetensors"
expect_error "no model.safetensors or model.safetensors.index.json" "$single"
# One NaN in lm_head.weight (in whichever shard holds it) is refused, naming the file, the tensor
# and its first bad index: an import must not make a run whose loss is NaN.
nan=$(edited nan llama_gqa_sharded 'pass')
"$python" - "$nan" <<'PY' || fail "could not write the NaN checkpoint"
import json, sys
from safetensors.torch import load_file, save_file
d = sys.argv[1]
shard = json.load(open(f"{d}/model.safetensors.index.json"))["weight_map"]["lm_head.weight"]
tensors = load_file(f"{d}/{shard}")
tensors["lm_head.weight"][3, 7] = float("nan")
save_file(tensors, f"{d}/{shard}", metadata={"format": "pt"})
print(shard)
PY
expect_error "safetensors: tensor 'lm_head.weight' holds NaN at \[3, 7\] (its first non-finite element; 1 in all)" "$nan"
wrong=$(edited wrong llama_tied 'c["intermediate_size"]=128')
expect_error "shapes that differ:" "$wrong"

# Nothing the user has is overwritten: an existing run, a config.yaml the import did not write.
"$normlab" import --from hf --checkpoint "$checkpoints/olmoe/hf" "${data[@]}" --out "$work/olmoe_run" > "$work/import.out" 2>&1 \
  || { cat "$work/import.out"; fail "import olmoe"; }
rc=0; "$normlab" import --from hf --checkpoint "$checkpoints/olmoe/hf" "${data[@]}" --out "$work/olmoe_run" > "$work/err.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] && grep -q "already holds checkpoints" "$work/err.out" || { cat "$work/err.out"; fail "import into a run"; }
mkdir -p "$work/mine" && echo "mine: true" > "$work/mine/config.yaml"
rc=0; "$normlab" import --from hf --checkpoint "$checkpoints/olmoe/hf" "${data[@]}" --out "$work/mine" > "$work/err.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] && grep -q "config.yaml" "$work/err.out" || { cat "$work/err.out"; fail "import over a user's config.yaml"; }
[ "$(cat "$work/mine/config.yaml")" = "mine: true" ] || fail "the user's config.yaml was changed"
echo "PASS"
