#!/usr/bin/env bash
# TensorBoard event files as a user gets them, on the built-in corpus fixture (CTest label
# slow): a run with logging.tensorboard, evaluation, tasks and diagnostics is stopped, loses its
# newest checkpoint (as a kill after a save loses the steps since), resumes from the older one
# and finishes; its events files, read back by TensorBoard's own readers
# (tests/cli/check_tensorboard.py), hold every number of metrics.jsonl and diagnostics.jsonl
# once at float precision, none of the abandoned steps twice. A two-point sweep writes one
# TensorBoard run per point. A Mixture-of-Experts run's aux losses and routing numbers are there
# too. Fails without tensorboard in PYTHON (tools/setup.sh installs it into the venv).
# Usage: tensorboard.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR
set -euo pipefail
normlab=$1 src=$2 kjv=$3 python=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
"$python" -c "import tensorboard" 2>/dev/null || fail "no tensorboard in $python (run tools/setup.sh, which installs it into the venv)"
check="$src/tests/cli/check_tensorboard.py"
common=(--config "$src/configs/tiny/lm.yaml" --set "data.train=$kjv/shards"
        --set "data.tokenizer=$kjv/tokenizer.model")

run=$work/run
args=("${common[@]}" --set train.steps=12 --set eval.every=3 --set eval.batches=2 --set eval.at_start=true
      --set "eval.tasks=$kjv/tasks/arithmetic.jsonl" --set diagnostics.every=5 --set checkpoint.every=4
      --set logging.tensorboard=true --out "$run")
rc=0; "$normlab" train "${args[@]}" --stop-after 7 > "$work/train1.out" 2>&1 || rc=$?
[ "$rc" -eq 4 ] || { cat "$work/train1.out"; fail "the stopped run exited $rc, not 4"; }
ls "$run/checkpoints" | grep -q "step-00000007" || fail "no checkpoint at the stop"
rm -rf "$run/checkpoints/step-00000007"   # back to step 4: steps 5-7 run again
grep -q '"step":7' "$run/metrics.jsonl" || fail "metrics.jsonl lacks step 7 before the resume"
"$normlab" train "${args[@]}" --resume > "$work/train2.out" 2>&1 || { cat "$work/train2.out"; fail "resume"; }
grep -q "tensorboard: .*/tensorboard/events.out.tfevents." "$work/train2.out" || fail "the log does not name the events file"
[ "$(ls "$run/tensorboard" | wc -l)" -eq 2 ] || { ls -l "$run/tensorboard"; fail "expected two events files (one per launch)"; }
"$python" "$check" "$run" || fail "the events files disagree with metrics.jsonl"
grep -q '"task_arithmetic_acc"' "$run/metrics.jsonl" || fail "no task accuracy to compare"
[ "$(wc -l < "$run/diagnostics.jsonl")" -eq 3 ] || fail "expected diagnostics at steps 5, 10 and 12"

# The check can fail: one value changed in metrics.jsonl is found.
cp -r "$run" "$work/changed"
"$python" - "$work/changed/metrics.jsonl" <<'EOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
for j in lines:
    if j["step"] == 9:
        j["lr"] *= 1.0 + 1e-6  # beyond float precision
open(sys.argv[1], "w").write("".join(json.dumps(j) + "\n" for j in lines))
EOF
"$python" "$check" "$work/changed" > "$work/changed.out" 2>&1 && fail "a changed learning rate went unnoticed"
grep -q "train/lr step 9" "$work/changed.out" || { cat "$work/changed.out"; fail "the changed value is not named"; }

# A sweep: each point's run folder has its own TensorBoard run.
"$normlab" sweep "${common[@]}" --lr 1e-3,3e-3 --set train.steps=4 --set eval.every=2 \
  --set logging.tensorboard=true --no-plots --out "$work/sweep" > "$work/sweep.out" 2>&1 \
  || { cat "$work/sweep.out"; fail "sweep"; }
points=("$work"/sweep/runs/*)
[ "${#points[@]}" -eq 2 ] || fail "expected two sweep points"
"$python" "$check" "${points[@]}" || fail "a sweep point's events disagree with its metrics"

# A Mixture-of-Experts run: its aux losses and routing numbers (metrics and diagnostics) too.
"$normlab" train --config "$src/configs/moe/tiny.yaml" --set "data.train=$kjv/shards" \
  --set "data.tokenizer=$kjv/tokenizer.model" --set train.steps=4 --set diagnostics.every=2 \
  --set checkpoint.at_end=false --set logging.tensorboard=true --out "$work/moe" > "$work/moe.out" 2>&1 \
  || { cat "$work/moe.out"; fail "MoE run"; }
grep -q '"moe_lb_loss"' "$work/moe/metrics.jsonl" && grep -q '"moe":' "$work/moe/diagnostics.jsonl" \
  || fail "the MoE run logged no aux losses or routing"
"$python" "$check" "$work/moe" || fail "the MoE run's events disagree with its JSONL files"
echo "PASS"
