#!/usr/bin/env bash
# The main job on the built-in default data, from a fresh clone: set up, build the CLI (only
# what the demo runs: the `normlab` program and the library), turn the King James Bible into a
# tokenizer and token shards, train a SiameseNorm (hybrid-pre) model on the CPU with
# configs/small/lm.yaml (200 steps where train.precision = auto picks bf16, measured on this
# CPU, else 120 in fp32: the demo says which and why), print the validation perplexity, export the model, draw its loss
# curve (runs/demo/loss.png) and print greedy continuations of a few prompts. The last lines
# give the time of each phase.
# Re-running continues the same run (runs/demo), so a finished demo returns at once.
# Env: NORMLAB_BUILD_DIR, and any `normlab train` --set through DEMO_SET (space-separated).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${NORMLAB_BUILD_DIR:-$root/build}
cd "$root"
normlab=$build/tools/normlab
phase_names=() phase_secs=()
t=$(date +%s)
phase() {  # phase NAME: the time since the previous phase ended goes to NAME
  local now
  now=$(date +%s)
  phase_names+=("$1")
  phase_secs+=($((now - t)))
  t=$now
}

"$root/tools/setup.sh"
phase setup
NORMLAB_SKIP_SETUP=1 "$root/tools/build.sh" --target normlab-cli -DNORMLAB_FAULT_INJECTION=OFF
"$normlab" version
phase build
"$root/tools/prepare_corpus.sh"
phase data

# train.precision = auto: bf16 autocast where this CPU computes bf16 natively and this model's
# GEMMs measured faster in bf16 (`normlab info --precision` measures them, or reads the cache,
# as `normlab train` does), else fp32. In fp32 a step takes about twice as long (2-core AMD EPYC
# with AVX2 only: 200 steps in 301 s), so the demo trains 120 steps there, to stay within 10
# minutes from a fresh clone; the samples stay readable. DEMO_SET=train.steps=N overrides.
# The demo trains on the CPU (train.device=cpu), also on a machine with a GPU.
demo_sets=(--set model.scheme=siamese_hybrid --set train.device=cpu --set train.precision=auto)
choice=$("$normlab" info --config configs/small/lm.yaml "${demo_sets[@]}" --precision \
         | sed -n 's/^train.precision = auto here: //p')
steps=200
case $choice in
  bf16*) echo "demo: training $steps steps in bf16: $choice" ;;
  *) steps=120
     echo "demo: training $steps steps in fp32, not 200 (DEMO_SET=train.steps=200 trains the full length): $choice" ;;
esac
sets=(--set train.steps=$steps)
for s in ${DEMO_SET:-}; do sets+=(--set "$s"); done
"$normlab" train --config configs/small/lm.yaml "${demo_sets[@]}" --out runs/demo --resume \
  "${sets[@]}"
"$normlab" export --checkpoint runs/demo --out runs/demo/export
phase training

python=$root/.venv/bin/python
[ -x "$python" ] || python=python3
if plot=$("$python" "$root/tools/plot_run.py" runs/demo 2>&1); then
  echo "demo: the loss curve is $root/$plot"
else
  echo "demo: no loss plot ($plot)"
fi
echo "demo: greedy continuations of the trained model (normlab generate --temperature 0):"
for prompt in "In the beginning" "And the LORD said unto Moses," "Blessed are the"; do
  text=$("$normlab" generate --checkpoint runs/demo --prompt "$prompt" --temperature 0 \
         --max-tokens 24 2>/dev/null | tr '\n' ' ')
  echo "  > $text"
done
phase "plot and samples"

echo "demo: outputs in runs/demo/: summary.json, metrics.jsonl, train.log, loss.png, checkpoints/,"
echo "      export/ (model.safetensors, config.json, tokenizer.model)"
total=0
line="demo: time"
for i in "${!phase_names[@]}"; do
  line+=" | ${phase_names[$i]} ${phase_secs[$i]} s"
  total=$((total + phase_secs[i]))
done
echo "$line | total ${total} s"
