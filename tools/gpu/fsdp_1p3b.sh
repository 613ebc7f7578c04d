#!/usr/bin/env bash
# Issue 6's GPU check: a single-rank NCCL FSDP run of configs/1.3b/siamese_hybrid.yaml for 20
# steps, launched by torchrun, reporting tokens/s, MFU and peak memory. Token shards come from
# `normlab data prepare` (tools/prepare_corpus.sh's data/kjv is enough: the model's vocabulary
# holds the tokenizer's); the content does not matter for speed.
# Usage: tools/gpu/fsdp_1p3b.sh NORMLAB DATA_DIR [MICRO_BATCH=4] [STEPS=20] [PYTHON=python3]
#   DATA_DIR holds shards/ and tokenizer.model. Writes runs/gpu-fsdp-1p3b (no checkpoint).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
normlab=$1 data=$2 micro=${3:-4} steps=${4:-20} python=${5:-python3}
out=$root/runs/gpu-fsdp-1p3b
rm -rf "$out"
"$python" -m torch.distributed.run --no-python --standalone --nproc-per-node 1 \
  "$normlab" train --config "$root/configs/1.3b/siamese_hybrid.yaml" --out "$out" \
  --set "data.train=$data/shards" --set "data.tokenizer=$data/tokenizer.model" \
  --set train.steps="$steps" --set train.micro_batch="$micro" --set train.global_batch="$micro" \
  --set scheduler.warmup_steps=2 --set eval.every=0 --set eval.batches=1 \
  --set checkpoint.every=0 --set checkpoint.at_end=false --set logging.every=5 \
  --set distributed.force_fsdp=true --set distributed.backend=nccl
"$python" - "$out" "$micro" <<'PY'
import json, sys
out, micro = sys.argv[1], int(sys.argv[2])
lines = [json.loads(l) for l in open(f"{out}/metrics.jsonl")]
s = json.load(open(f"{out}/summary.json"))
steady = lines[len(lines) // 2:]  # the second half: past warm-up and allocator growth
tps = sum(l["tokens_per_s"] for l in steady) / len(steady)
log = open(f"{out}/train.log").read().splitlines()
mfu = [l.split("mfu ")[1].split("%")[0] for l in log if "mfu " in l]
print(f"1.3B siamese_hybrid, 1 rank FSDP over NCCL, micro-batch {micro} x 2048: "
      f"{tps:.0f} tokens/s (mean of steps {steady[0]['step']}-{steady[-1]['step']}), "
      f"MFU {mfu[-1] if mfu else '?'}% (last progress line), peak memory {s['peak_memory_bytes'] / 2**30:.1f} GiB, "
      f"final loss {s['final_train_loss']:.3f}")
PY
