#!/usr/bin/env bash
# lm-evaluation-harness on a `normlab export --format hf` folder, offline, over the built-in
# KJV task files through tools/lm_eval/*.yaml, as docs/interop.md shows it: its accuracies
# equal `normlab eval --tasks` on the same items (acc = acc; lm-eval's acc_bytes = normlab's
# acc_norm, both per UTF-8 byte). A tiny SiameseNorm model trained 30 steps.
# Usage: lm_eval.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR
# Prints PASS; fails when Python has no lm_eval, accelerate or transformers (tools/setup.sh --tests
# installs lm-eval and accelerate).
set -euo pipefail
normlab=$1 src=$2 kjv=$3 python=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
work=$(cd "$work" && pwd) src=$(cd "$src" && pwd)
case $python in */*) python=$(cd "$(dirname "$python")" && pwd)/$(basename "$python") ;; esac
fail() { echo "FAIL: $*"; exit 1; }
source "$(dirname "${BASH_SOURCE[0]}")/python_modules.sh"
require_python_modules "$python" lm_eval accelerate transformers
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1

"$normlab" train --config "$src/configs/tiny/lm.yaml" --set "data.train=$kjv/shards" \
  --set "data.tokenizer=$kjv/tokenizer.model" --set train.steps=30 --set eval.every=0 --set eval.batches=1 \
  --out "$work/run" > "$work/train.out" 2>&1 || { cat "$work/train.out"; fail "train"; }
"$normlab" export --format hf --checkpoint "$work/run" --out "$work/hf" > /dev/null
"$normlab" eval --checkpoint "$work/run" --tasks "$kjv/tasks/arithmetic.jsonl" \
  "$kjv/tasks/kjv_next_verse.jsonl" --out "$work/normlab.json" > "$work/normlab.out" 2>&1 \
  || { cat "$work/normlab.out"; fail "normlab eval"; }

# The task YAMLs read data/kjv/tasks/*.jsonl from the working directory, as from the repository root.
mkdir -p "$work/cwd/data" && ln -s "$(cd "$kjv" && pwd)" "$work/cwd/data/kjv"
(cd "$work/cwd" && "$python" -m lm_eval --model hf \
  --model_args "pretrained=$work/hf,trust_remote_code=True,dtype=float32,max_length=2048" \
  --include_path "$src/tools/lm_eval" --tasks kjv_arithmetic,kjv_next_verse \
  --batch_size 8 --device cpu --output_path "$work/lm_eval") > "$work/lm_eval.out" 2>&1 \
  || { tail -30 "$work/lm_eval.out"; fail "lm_eval"; }

"$python" - "$work/normlab.json" "$work/lm_eval" <<'PY' || fail "lm-eval and normlab eval disagree"
import glob, json, sys
ours = json.load(open(sys.argv[1]))["tasks"]
files = glob.glob(f"{sys.argv[2]}/**/results_*.json", recursive=True)
if len(files) != 1:
    sys.exit(f"expected one lm-eval results file, found {files}")
theirs = json.load(open(files[0]))["results"]
bad = 0
for task, name in (("arithmetic", "kjv_arithmetic"), ("kjv_next_verse", "kjv_next_verse")):
    for ours_key, their_key in (("acc", "acc,none"), ("acc_norm", "acc_bytes,none")):
        a, b = ours[task][ours_key], theirs[name][their_key]
        same = abs(a - b) < 1e-12
        bad += not same
        print(f"{task} {ours_key}: normlab {a:.4f}, lm-eval {their_key.split(',')[0]} {b:.4f}"
              f"{'' if same else '  DIFFERENT'}")
sys.exit(1 if bad else 0)
PY
echo "PASS"
