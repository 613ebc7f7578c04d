#!/usr/bin/env bash
# The FSDP check at the paper's 1.3B shape: a single-rank NCCL FSDP run of
# configs/1.3b/siamese_hybrid.yaml (distributed.force_fsdp), started without torchrun: the
# rendezvous variables are set here (RANK=0, WORLD_SIZE=1, LOCAL_RANK=0, MASTER_ADDR=127.0.0.1),
# so no host name is resolved, and the communication timeout is 60 s, so a hang ends the run
# instead of the session. Checks that every step's loss is finite and prints tokens/s (the
# second half of the steps), the trainer's steady-state MFU both ways (summary.json: over the
# GPU's peak by its name, with its spread, and over the measured matmul rate), peak memory and
# the attention kernel.
# Token shards come from `normlab data prepare` (the built-in corpus will do: the model's
# vocabulary holds the tokenizer's); their content does not matter for speed.
# Usage: tools/gpu/fsdp_1p3b.sh NORMLAB DATA_DIR OUT_DIR [MICRO_BATCH=4] [STEPS=20] [PYTHON=python3]
#   DATA_DIR holds shards/ and tokenizer.model; OUT_DIR becomes the run folder (no checkpoint).
# Env: NORMLAB_BENCH_DEVICE=cpu with NORMLAB_BENCH_SET="key=value ..." runs the same launch on
#      the CPU at a small shape (FSDP over the one-process communicator): the dry run.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
normlab=$1 data=$2 run=$3 micro=${4:-4} steps=${5:-20} python=${6:-python3}
device=${NORMLAB_BENCH_DEVICE:-cuda}
backend=nccl
[ "$device" = cpu ] && backend=auto
sets=()
for kv in ${NORMLAB_BENCH_SET:-}; do sets+=(--set "$kv"); done
rm -rf "$run"
RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=${MASTER_PORT:-29517} \
  "$normlab" train --config "$root/configs/1.3b/siamese_hybrid.yaml" --out "$run" "${sets[@]}" \
    --set "data.train=$data/shards" --set "data.tokenizer=$data/tokenizer.model" \
    --set train.steps="$steps" --set train.micro_batch="$micro" --set train.global_batch="$micro" \
    --set train.device="$device" --set scheduler.warmup_steps=2 --set eval.every=0 --set eval.batches=1 \
    --set checkpoint.every=0 --set checkpoint.at_end=false --set logging.every=5 \
    --set distributed.force_fsdp=true --set distributed.backend=$backend --set distributed.timeout_seconds=60
"$python" - "$run" "$micro" <<'PY'
import json, math, sys
run, micro = sys.argv[1], int(sys.argv[2])
rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
s = json.load(open(f"{run}/summary.json"))
losses = [r.get("loss") for r in rows]
ok = len(rows) == s["steps_planned"] and all(l is not None and math.isfinite(l) for l in losses)
steady = rows[len(rows) // 2:]  # the second half: past warm-up and allocator growth
per_step = rows[-1]["tokens"] // rows[-1]["step"]
tps = len(steady) * per_step / sum(r["step_seconds"] for r in steady)
if "mfu" in s:
    mfu = (f"MFU {100 * s['mfu']:.1f} % +- {100 * s.get('mfu_spread', 0):.1f} of {s['peak_flops'] / 1e12:.0f} "
           f"TFLOP/s ({s.get('gpu')}) over its last {s.get('mfu_steps')} steps")
elif "mfu_measured" in s:
    mfu = f"no peak for {s.get('gpu')} (logging.peak_tflops)"
else:
    mfu = "no MFU (not a GPU run)"
if "mfu_measured" in s:
    mfu += f", {100 * s['mfu_measured']:.1f} % of the measured matmul rate"
print(f"siamese_hybrid, FSDP on 1 rank, micro-batch {micro}: {len(rows)} steps, "
      f"loss {losses[0]:.3f} -> {losses[-1]:.3f} ({'all finite' if ok else 'NOT ALL FINITE'}), "
      f"{tps:.0f} tokens/s over steps {steady[0]['step']}-{steady[-1]['step']}, {mfu}, "
      f"peak memory {s['peak_memory_bytes'] / 2**30:.1f} GiB, attention {s.get('attention_backend')}")
sys.exit(0 if ok else 1)
PY
