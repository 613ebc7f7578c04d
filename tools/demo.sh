#!/usr/bin/env bash
# The main job on the built-in default data, from a fresh clone: set up and build normlab,
# turn the King James Bible into a tokenizer and token shards, train a SiameseNorm
# (hybrid-pre) model on the CPU with configs/small/lm.yaml (about 5 minutes on 2 cores), print
# the validation perplexity, and export the model.
# Re-running continues the same run (runs/demo), so a finished demo returns at once.
# Env: NORMLAB_BUILD_DIR, and any `normlab train` --set through DEMO_SET (space-separated).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${NORMLAB_BUILD_DIR:-$root/build}
cd "$root"
"$root/tools/build.sh"
"$build/tools/normlab" version
"$root/tools/prepare_corpus.sh"

sets=()
for s in ${DEMO_SET:-}; do sets+=(--set "$s"); done
start=$(date +%s)
"$build/tools/normlab" train --config configs/small/lm.yaml --set model.scheme=siamese_hybrid \
  --out runs/demo --resume "${sets[@]}"
"$build/tools/normlab" export --checkpoint runs/demo --out runs/demo/export
echo "demo: trained and evaluated in $(( $(date +%s) - start )) s; outputs in runs/demo/"
echo "      summary.json, metrics.jsonl, train.log, checkpoints/, export/ (model.safetensors, config.json, tokenizer.model)"
