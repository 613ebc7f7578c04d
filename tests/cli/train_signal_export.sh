#!/usr/bin/env bash
# `normlab train` as a user runs it: SIGTERM in the middle of a run saves a loadable checkpoint
# and exits 4; --resume finishes the run (exit 0); `normlab export` writes a folder that
# Python's safetensors loads; a diverging run exits 3. Run by CTest (label slow) on the
# built-in corpus fixture. The SIGTERM arrives at a known step: NORMLAB_FAULT=raise_at_step
# (a test-only hook of the CLI, docs/reliability.md) makes the process send it to itself after
# step 3, taken by the same waiter thread as a `kill -TERM` from outside. Then a `kill -TERM`
# from outside, after signal_mask.sh checked that no thread can run a handler for it.
# Usage: train_signal_export.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR
set -euo pipefail
normlab=$1 src=$2 kjv=$3 python=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
args=(--config "$src/configs/tiny/lm.yaml" --set "data.train=$kjv/shards" --set "data.tokenizer=$kjv/tokenizer.model"
      --set checkpoint.every=0 --set eval.every=0 --set logging.every=1000)

rc=0
NORMLAB_FAULT=raise_at_step:SIGTERM:3 "$normlab" train "${args[@]}" --out "$work/run" --set train.steps=50 \
  > "$work/train1.out" 2>&1 || rc=$?
[ "$rc" -eq 4 ] || { cat "$work/train1.out"; echo "FAIL: exit code $rc after SIGTERM, expected 4"; exit 1; }
grep -q '"status": "interrupted"' "$work/run/summary.json" || { echo "FAIL: summary does not say interrupted"; exit 1; }
[ "$(ls "$work/run/checkpoints")" = step-00000003 ] \
  || { ls "$work/run/checkpoints"; echo "FAIL: the checkpoint is not the one of step 3, where SIGTERM came"; exit 1; }
[ "$(wc -l < "$work/run/metrics.jsonl")" -eq 3 ] || { echo "FAIL: metrics.jsonl should hold steps 1-3"; exit 1; }
ckpt=$(ls -d "$work"/run/checkpoints/step-* | tail -1)
steps=$(basename "$ckpt" | sed 's/step-0*//')
echo "SIGTERM: exit 4 with checkpoint $(basename "$ckpt")"

# SIGTERM from outside, in the middle of a run.
"$normlab" train "${args[@]}" --out "$work/outside" --set train.steps=100000 > "$work/outside.out" 2>&1 &
job=$!
for _ in $(seq 1 600); do
  [ -f "$work/outside/metrics.jsonl" ] && [ "$(wc -l < "$work/outside/metrics.jsonl")" -ge 2 ] && break
  sleep 0.1
done
"$(dirname "$0")/signal_mask.sh" "$job" || { kill -9 "$job"; exit 1; }
kill -TERM "$job"
rc=0
wait "$job" || rc=$?
[ "$rc" -eq 4 ] || { cat "$work/outside.out"; echo "FAIL: exit code $rc after kill -TERM, expected 4"; exit 1; }
grep -q '"status": "interrupted"' "$work/outside/summary.json" || { echo "FAIL: no interrupted summary after kill -TERM"; exit 1; }
echo "kill -TERM from outside: exit 4 after step $(wc -l < "$work/outside/metrics.jsonl")"

"$normlab" train "${args[@]}" --out "$work/run" --set train.steps=$((steps + 2)) --resume > "$work/train2.out" 2>&1 \
  || { cat "$work/train2.out"; echo "FAIL: resume did not complete"; exit 1; }
grep -q "resumed from .*step-0*$steps at step $steps" "$work/run/train.log" || { echo "FAIL: no resume in train.log"; exit 1; }
grep -q '"status": "completed"' "$work/run/summary.json" || { echo "FAIL: resumed run did not complete"; exit 1; }
echo "resume: completed at step $((steps + 2))"

"$normlab" export --checkpoint "$work/run" --out "$work/export"
"$python" - "$work/export" <<'PY'
import json, sys
from safetensors.torch import load_file
d = sys.argv[1]
cfg = json.load(open(f"{d}/config.json"))
w = load_file(f"{d}/model.safetensors")
m = cfg["model"]
assert cfg["format"] == "normlab" and m["scheme"] == "siamese_hybrid", cfg
assert tuple(w["embed.weight"].shape) == (m["vocab_size"], m["d_model"]), w["embed.weight"].shape
assert tuple(w[f"blocks.{m['n_layers'] - 1}.c1"].shape) == (m["d_model"],)
assert all(t.isfinite().all() for t in w.values())
print(f"python safetensors: {len(w)} tensors, {sum(t.numel() for t in w.values())} parameters")
PY
# A learning rate far too high ends the run as diverged, with exit code 3.
rc=0
"$normlab" train "${args[@]}" --set train.steps=20 --set optimizer.lr=1e12 --set optimizer.grad_clip=0 \
  --set scheduler.warmup_steps=0 --out "$work/diverge" > "$work/diverge.out" 2>&1 || rc=$?
[ "$rc" -eq 3 ] || { cat "$work/diverge.out"; echo "FAIL: exit code $rc for a diverging run, expected 3"; exit 1; }
grep -q '"status": "diverged"' "$work/diverge/summary.json" || { echo "FAIL: summary does not say diverged"; exit 1; }
echo "divergence: exit 3, $(grep diverged_at "$work/diverge/summary.json" | tr -d ' ,')"
echo "PASS"
