#!/usr/bin/env bash
# `normlab export --format hf` for every scheme and switch, checked in Python, offline
# (tests/cli/hf_check.py): the tokenizer gives normlab's ids, the fp32 logits equal normlab's
# to 1e-5 relative, greedy generate() gives `normlab generate --temperature 0`'s tokens,
# bfloat16 loading gives finite logits near fp32. Each case is a tiny model trained 20 steps
# on the built-in corpus. What computes no logits (the tokenizer on more texts, the export's
# options and errors) is hf_export_options.sh, outside the label kernels.
# Usage: hf_export.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR
# Prints PASS; fails when Python cannot import transformers (tools/setup.sh --tests installs it).
set -euo pipefail
normlab=$1 src=$2 kjv=$3 python=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
source "$(dirname "${BASH_SOURCE[0]}")/python_modules.sh"
require_python_modules "$python" transformers tokenizers sentencepiece safetensors
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

# name | overrides: every scheme, and the switches (GQA, q/k/v norms, LayerNorm, tied
# embeddings, DeepNorm alpha/beta, the Mix-LN split, SiameseNorm's three switches, MoE MLPs,
# Hyper-Connections' static/dynamic, tanh, n and mHC, SiameseNorm x Hyper-Connections with DHC
# and mHC); @FILE: configs/tiny/FILE, not lm.yaml
cases=(
  "pre_norm|model.scheme=pre_norm model.n_kv_heads=2"
  "pre_norm_tied_ln_qkv|model.scheme=pre_norm model.tie_embeddings=true model.norm_type=layernorm model.qkv_norm=true"
  "post_norm|model.scheme=post_norm"
  "deep_norm|model.scheme=deep_norm model.deep_norm_alpha=1.5 model.deep_norm_beta=0.5"
  "hybrid_norm|model.scheme=hybrid_norm"
  "hybrid_norm_star|model.scheme=hybrid_norm_star model.n_layers=3"
  "peri_norm|model.scheme=peri_norm model.norm_type=layernorm"
  "reordered_norm_qk_norm|model.scheme=reordered_norm model.qk_norm=full"
  "mix_ln|model.scheme=mix_ln model.n_layers=4 model.mix_ln_post_layers=1"
  "resi_dual|model.scheme=resi_dual model.qkv_norm=true"
  "siamese|model.scheme=siamese"
  "siamese_switches|model.scheme=siamese model.siamese.depth_scale=false model.siamese.input_norm=false model.siamese.output_fusion=paper model.tie_embeddings=true"
  "siamese_hybrid|model.scheme=siamese_hybrid"
  "siamese_hybrid_switches|model.scheme=siamese_hybrid model.siamese.input_norm=false model.siamese.output_fusion=paper model.n_kv_heads=1"
  "moe_pre_norm|model.scheme=pre_norm model.moe.n_experts=4 model.moe.top_k=2 model.moe.d_expert=32"
  "moe_siamese_hybrid|model.scheme=siamese_hybrid model.moe.n_experts=4 model.moe.top_k=1 model.moe.renormalize=true model.moe.every=2"
  "hyper_dhc2|@hyper_dhc2.yaml"
  "hyper_dhc4_notanh|@hyper_dhc2.yaml model.hyper.n=4 model.hyper.tanh=false model.tie_embeddings=true"
  "hyper_shc4|@hyper_dhc2.yaml model.hyper.n=4 model.hyper.dynamic=false model.norm_type=layernorm"
  "hyper_mhc4|@hyper_dhc2.yaml model.hyper.variant=mhc model.hyper.n=4"
  "siamese_hybrid_hyper_dhc2|@siamese_hybrid_hyper.yaml"
  "siamese_hyper_mhc4|model.scheme=siamese model.siamese.hyper.variant=mhc model.siamese.hyper.n=4"
)
prompt="And God said unto Moses, "
dirs=()
for c in "${cases[@]}"; do
  name=${c%%|*} sets=() config=lm.yaml
  for s in ${c#*|}; do
    case $s in @*) config=${s#@} ;; *) sets+=(--set "$s") ;; esac
  done
  d=$work/$name
  # The validation loss at the end is not checked here: one batch of it (eval.batches=1), not
  # the whole split, for each of the 22 runs.
  "$normlab" train --config "$src/configs/tiny/$config" --set "data.train=$kjv/shards" \
    --set "data.tokenizer=$kjv/tokenizer.model" --set train.steps=20 --set eval.every=0 --set eval.batches=1 "${sets[@]}" \
    --out "$d/run" > "$d.train.out" 2>&1 || { cat "$d.train.out"; fail "train $name"; }
  "$normlab" export --format hf --checkpoint "$d/run" --out "$d/hf" > /dev/null || fail "export $name"
  printf '%s' "$prompt" > "$d/prompt.txt"
  "$normlab" generate --checkpoint "$d/run" --prompt "$prompt" --max-tokens 16 --temperature 0 \
    --logits-out "$d/normlab.safetensors" > "$d/greedy.txt" || fail "generate $name"
  dirs+=("$d")
done
for f in config.json generation_config.json model.safetensors modeling_normlab.py \
  configuration_normlab.py tokenizer.model tokenizer_config.json; do
  [ -s "$work/siamese/hf/$f" ] || fail "the HF export has no $f"
done
cmp "$work/siamese/hf/modeling_normlab.py" "$src/src/train/hf/modeling_normlab.py" \
  || fail "the exported modeling_normlab.py is not src/train/hf's (rebuild: it is compiled in)"

"$python" "$src/tests/cli/hf_check.py" "${dirs[@]}" || fail "the HF exports disagree with normlab"

echo "PASS"
