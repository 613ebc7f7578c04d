#!/usr/bin/env bash
# bf16 against fp32 on the CPU, every scheme on configs/small/lm.yaml (docs/results/bf16_cpu_scale.md,
# "Loss curves: bf16 within the fp32 seed band"): each scheme trains STEPS steps in fp32 with
# seeds 0 and 1 and in bf16 (CPU autocast) with seed 0; tools/bf16_band_report.py then compares,
# step by step, the bf16 curve with the fp32 curve of the same seed (same initial weights, same
# batches) and sets that gap against the gap between the two fp32 seeds (the band). Two runs at a
# time. Resumable (finished runs are kept). Env: NORMLAB_REPRO_DIR (default runs/bf16_band).
# Usage: tools/bf16_band.sh [STEPS=100] [SCHEMES=the seven schemes of the paper's comparison]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
steps=${1:-100}
schemes=${2:-pre_norm,post_norm,deep_norm,hybrid_norm,resi_dual,siamese,siamese_hybrid}
work=${NORMLAB_REPRO_DIR:-$root/runs/bf16_band}
start=$(date +%s)
tools/prepare_corpus.sh > /dev/null
n=${NORMLAB_BIN:-$root/build/tools/normlab}
common=(sweep --config configs/small/lm.yaml --scheme "$schemes" --jobs 2 --no-plots
        --set train.steps="$steps" --set eval.every=0 --set checkpoint.every=0 --set checkpoint.at_end=false)
"$n" "${common[@]}" --seed 0,1 --set train.precision=fp32 --out "$work/fp32"
"$n" "${common[@]}" --seed 0 --set train.precision=bf16 --out "$work/bf16"
"${NORMLAB_VENV:-$root/.venv}/bin/python" tools/bf16_band_report.py "$work"
echo "bf16_band: done in $(( ($(date +%s) - start) / 60 )) min ($(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'))"
