#!/usr/bin/env bash
# The Mixture-of-Experts dispatch on the GPU: configs/moe/olmoe_1b7b.yaml (64 experts of 1024,
# top-8, d_model 2048) cut to a few blocks, trained STEPS steps in bf16 autocast with
# model.moe.dispatch = loop (one GEMM pair per expert) and = grouped (two grouped GEMMs for all
# experts), same seed and data. Checks that every loss is finite and that both sides' first
# losses agree to bf16 precision, and prints each side's median step time over the second half
# of the steps, its tokens/s and peak memory, and the ratio grouped / loop.
# Usage: tools/gpu/moe_dispatch.sh NORMLAB DATA_DIR OUT_DIR [MICRO_BATCH=4] [STEPS=12] [LAYERS=2] [PYTHON=python3]
#   DATA_DIR holds shards/ and tokenizer.model; OUT_DIR gets a run folder per side.
# Env: NORMLAB_BENCH_DEVICE=cpu runs the same at a tiny shape (8 experts of 64, top-2, d_model
#      64, sequence 64, float32): the dry run.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
normlab=$1 data=$2 out=$3 micro=${4:-4} steps=${5:-12} layers=${6:-2} python=${7:-python3}
device=${NORMLAB_BENCH_DEVICE:-cuda}
sets=(--set "model.n_layers=$layers")
[ "$device" = cpu ] && sets+=(--set model.vocab_size=4096 --set model.d_model=64 --set model.n_heads=4
  --set model.moe.n_experts=8 --set model.moe.top_k=2 --set model.moe.d_expert=64
  --set data.seq_len=64 --set train.precision=fp32)
mkdir -p "$out"
for side in loop grouped; do
  rm -rf "${out:?}/$side"
  "$normlab" train --config "$root/configs/moe/olmoe_1b7b.yaml" --out "$out/$side" "${sets[@]}" \
    --set "data.train=$data/shards" --set "data.tokenizer=$data/tokenizer.model" \
    --set train.steps="$steps" --set train.micro_batch="$micro" --set train.global_batch="$micro" \
    --set train.device="$device" --set scheduler.warmup_steps=2 --set eval.every=0 --set eval.batches=1 \
    --set checkpoint.every=0 --set checkpoint.at_end=false --set logging.every=4 \
    --set model.moe.dispatch="$side"
done
"$python" - "$out" "$micro" "$layers" <<'PY'
import json, math, statistics, sys
out, micro, layers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
res, ok = {}, True
for side in ("loop", "grouped"):
    rows = [json.loads(l) for l in open(f"{out}/{side}/metrics.jsonl")]
    s = json.load(open(f"{out}/{side}/summary.json"))
    losses = [r.get("loss") for r in rows]
    finite = len(rows) == s["steps_planned"] and all(l is not None and math.isfinite(l) for l in losses)
    ok &= finite
    steady = rows[len(rows) // 2:]
    step = statistics.median(r["step_seconds"] for r in steady)
    tps = rows[-1]["tokens"] // rows[-1]["step"] / step
    res[side] = (step, losses)
    print(f"{side:8s} {len(rows)} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f} "
          f"({'all finite' if finite else 'NOT ALL FINITE'}), median step {step:.4f} s over steps "
          f"{steady[0]['step']}-{steady[-1]['step']}, {tps:.0f} tokens/s, "
          f"peak memory {s.get('peak_memory_bytes', 0) / 2**30:.1f} GiB")
# Same weights, data and routing at step 1: the first losses differ only by rounding.
first = abs(res["grouped"][1][0] - res["loop"][1][0]) / abs(res["loop"][1][0])
ok &= first < 1e-2
print(f"MoE dispatch, {layers} blocks, micro-batch {micro}: grouped / loop step time "
      f"{res['grouped'][0] / res['loop'][0]:.3f}x; first losses differ by {first:.1e} relative"
      f"{'' if first < 1e-2 else ' (MORE THAN 1e-2)'}")
sys.exit(0 if ok else 1)
PY
