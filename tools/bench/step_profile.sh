#!/usr/bin/env bash
# Where a `normlab train` step's CPU time goes, sampled with Linux perf inside a real run (the
# shape of tools/bench/bf16_bench.sh): after WARMUP steps, perf samples the process for about
# STEPS steps, and the samples are put in groups by library and symbol:
#   GEMM            MKL's and oneDNN's matrix products (packing included), wherever called from:
#                   the linear layers and the blocks of the flash attention
#   OpenMP waits    libgomp: a thread that finished its share of a parallel region, waiting
#   attention       ATen's flash attention outside its GEMMs (softmax, rescaling)
#   optimizer       the fused AdamW step
#   normlab         normlab's own kernels (RMSNorm, RoPE, ...)
#   ATen other      every other ATen kernel (SiLU, products, copies, the loss, ...)
#   kernel, other   the operating system, the rest
# Then the bound this puts on the step: the model FLOPs over the time in GEMMs is the rate the
# step would reach if nothing but its GEMMs ran, against the N^3 matmul rate of this run.
# Needs perf (Debian: linux-perf) and permission to profile (root, or perf_event_paranoid <= 1).
# Run under tools/simulate_cpu.sh for a lower CPU class.
# Usage: tools/bench/step_profile.sh [SHAPE=512] [SCHEME=pre_norm] [PRECISION=fp32] [STEPS=8]
#                                    [WARMUP=3]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${NORMLAB_BUILD_DIR:-$root/build}
py=${NORMLAB_VENV:-$root/.venv}/bin/python
shape=${1:-512} scheme=${2:-pre_norm} precision=${3:-fp32} steps=${4:-8} warmup=${5:-3}
case $shape in
  small) d=256 L=6 H=8 F=688 ;;
  512) d=512 L=8 H=8 F=1376 ;;
  *) echo "step_profile: unknown shape '$shape' (small, 512)" >&2; exit 2 ;;
esac
command -v perf > /dev/null || { echo "step_profile: needs perf (Debian: apt-get install linux-perf)" >&2; exit 1; }
"$root/tools/prepare_corpus.sh" > /dev/null
work=$(mktemp -d)
pid=
trap '[ -z "$pid" ] || kill "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //' || true), $(nproc) threads"
echo "cpu class: $("$build/tools/normlab" version | sed -n 's/^  cpu class: //p')"

"$build/tools/normlab" train --config "$root/configs/small/lm.yaml" --set model.scheme="$scheme" \
  --set model.d_model=$d --set model.n_layers=$L --set model.n_heads=$H --set model.d_ff=$F \
  --set train.precision="$precision" --set train.steps=$((warmup + steps + 2)) --set train.global_batch=8 \
  --set train.micro_batch=8 --set eval.every=0 --set eval.batches=1 --set checkpoint.every=0 \
  --set logging.every=1000 --out "$work/run" > "$work/log" 2>&1 &
pid=$!
metrics=$work/run/metrics.jsonl
step_of() { [ -f "$metrics" ] && wc -l < "$metrics" || echo 0; }
while [ "$(step_of)" -lt "$warmup" ]; do
  kill -0 "$pid" 2>/dev/null || { cat "$work/log" >&2; echo "step_profile: the run stopped" >&2; exit 1; }
  sleep 0.2
done
first=$(step_of)
last_step=$(tail -1 "$metrics" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["step_seconds"])')
window=$("$py" -c "print(round($steps * $last_step, 1))")
perf record -q -F 999 -p "$pid" -o "$work/perf.data" -- sleep "$window" 2> "$work/perf.log" \
  || { cat "$work/perf.log" >&2; echo "step_profile: perf record failed (permission? see perf_event_paranoid)" >&2; exit 1; }
done_steps=$(step_of)
wait "$pid" || { cat "$work/log" >&2; exit 1; }
pid=
perf report -i "$work/perf.data" --no-children --sort dso,sym -g none --stdio -t $'\t' 2> /dev/null > "$work/report"
rate=$("$py" "$root/tools/bench/matmul_rate.py" --device cpu --n 2048 --reps 5 | sed -n 's/^matmul_flops=//p')
fpt=$(sed -n 's/.* \([0-9.e+]*\) FLOP per token.*/\1/p' "$work/run/train.log" | head -1)
"$py" - "$work/report" "$metrics" "$first" "$done_steps" "$rate" "$fpt" "$((8 * 256))" <<'PY'
import json, re, sys
report, metrics, first, last, rate, fpt, tokens = sys.argv[1:]
groups = {}
order = ["GEMM", "OpenMP waits", "attention", "optimizer", "normlab", "ATen other", "kernel", "other"]
for line in open(report):
    parts = line.rstrip("\n").split("\t")
    if len(parts) < 3 or not parts[0].strip().endswith("%"):
        continue
    share, dso, sym = float(parts[0].strip().rstrip("%")), parts[1], parts[2]
    if re.search(r"mkl_blas|sgemm|dgemm|gemm_kernel|dnnl|brgemm|jit_avx|jit_uni", sym):
        g = "GEMM"
    elif "libgomp" in dso:
        g = "OpenMP waits"
    elif "flash_attention" in sym:
        g = "attention"
    elif "adam" in sym:
        g = "optimizer"
    elif "libnormlab" in dso:
        g = "normlab"
    elif "libtorch" in dso or "libc10" in dso:
        g = "ATen other"
    elif "kernel" in dso:
        g = "kernel"
    else:
        g = "other"
    groups[g] = groups.get(g, 0.0) + share
total = sum(groups.values()) or 1.0
steps = [json.loads(l)["step_seconds"] for l in open(metrics)][int(first):int(last)]
step = sorted(steps)[len(steps) // 2]
print(f"{len(steps)} steps sampled, median step {step:.3f} s; share of the samples:")
for g in order:
    if g in groups:
        print(f"  {g:14s} {100 * groups[g] / total:5.1f} %  ({step * groups[g] / total:.3f} s of the step)")
flop = float(fpt) * int(tokens)
gemm_s = step * groups.get("GEMM", 0.0) / total
r = float(rate)
print(f"model FLOPs {flop / 1e9:.1f} G a step: {flop / step / 1e9:.1f} GFLOP/s, {100 * flop / step / r:.0f} % of "
      f"the 2048^3 fp32 matmul rate ({r / 1e9:.1f} GFLOP/s, this run)")
if gemm_s > 0:
    print(f"over the time in GEMMs alone: {flop / gemm_s / 1e9:.1f} GFLOP/s, {100 * flop / gemm_s / r:.0f} % "
          f"(the step's ceiling were everything else free)")
    for target in (0.85,):
        budget = flop / (target * r) - gemm_s
        print(f"at {100 * target:.0f} % the rest may take {max(budget, 0):.3f} s of the step "
              f"(it takes {step - gemm_s:.3f} s)")
PY
