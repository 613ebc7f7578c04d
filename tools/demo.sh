#!/usr/bin/env bash
# The main job on the built-in default data, from a fresh clone: setup, build, then the run.
# Today (foundation only) it builds normlab and shows what it runs on; the corpus, tokenizer
# and SiameseNorm training run join as the data pipeline and trainer land.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${NORMLAB_BUILD_DIR:-$root/build}
"$root/tools/build.sh"
"$build/tools/normlab" version
echo "demo: training is not implemented yet; this demo only builds normlab and reports the devices."
