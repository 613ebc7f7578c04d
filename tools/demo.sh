#!/usr/bin/env bash
# The main job on the built-in default data, from a fresh clone: setup, build, the corpus
# (tokenizer and shards of the King James Bible), then the run.
# Until the trainer lands this stops after the data and the model summary, and says so.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${NORMLAB_BUILD_DIR:-$root/build}
"$root/tools/build.sh"
"$build/tools/normlab" version
"$root/tools/prepare_corpus.sh"
"$build/tools/normlab" info --config "$root/configs/tiny/lm.yaml" --world-size 1
echo "demo: training is not implemented yet; this demo builds normlab, prepares the corpus and shows the model."
