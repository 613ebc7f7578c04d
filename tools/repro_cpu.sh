#!/usr/bin/env bash
# The paper's findings at CPU scale, as one command (docs/results/cpu_scale.md):
#   1. a learning-rate sweep of seven schemes x four peak learning rates (configs/sweeps/cpu_scale.yaml
#      on configs/small/study.yaml), seed 0;
#   2. a second seed for the headline rows (pre_norm, siamese_hybrid);
#   3. SiameseNorm's ablation grid, depth scaling x normalized input fusion, at lr 1e-2, seeds 0 and 1;
#   4. stream norms against depth and the pruning curve of Pre-Norm and SiameseNorm (normlab
#      analyze on the seed-0 runs at lr 1e-2);
#   5. the tables and plots into docs/results/cpu_scale/ (tools/repro_cpu_report.py).
# Everything is resumable: run it again after an interruption and finished runs are kept.
# The runs use an installed copy of normlab (WORK/prefix), so rebuilding build/ meanwhile is safe.
# About 75 minutes on 2 cores. Env: NORMLAB_REPRO_DIR (default runs/repro_cpu), NORMLAB_JOBS (2),
# NORMLAB_REPRO_PRECISION (train.precision, default auto; the published tables are fp32).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
work=${NORMLAB_REPRO_DIR:-$root/runs/repro_cpu}
jobs=${NORMLAB_JOBS:-2}
precision=${NORMLAB_REPRO_PRECISION:-auto}  # auto: on a CPU with native bf16 the faster of bf16 and fp32 as measured there, else fp32
out=$root/docs/results/cpu_scale
start=$(date +%s)

tools/build.sh > /dev/null
tools/prepare_corpus.sh > /dev/null
cmake --install build --prefix "$work/prefix" > /dev/null
n=$work/prefix/bin/normlab
sweep=(sweep --sweep configs/sweeps/cpu_scale.yaml --jobs "$jobs" --no-plots
       --set train.precision="$precision")

echo "== 1. learning-rate sweep, seed 0"
"$n" "${sweep[@]}" --out "$work/sweep"
echo "== 2. seed 1 of the headline rows"
"$n" "${sweep[@]}" --scheme pre_norm,siamese_hybrid --seed 1 --out "$work/seed1"
echo "== 3. SiameseNorm ablations at lr 1e-2"
for ds in true false; do
  for inorm in true false; do
    "$n" "${sweep[@]}" --scheme siamese_hybrid --lr 1e-2 --seed 0,1 --set model.siamese.depth_scale=$ds \
      --set model.siamese.input_norm=$inorm --out "$work/ablation-depth_$ds-input_$inorm"
  done
done
echo "== 4. diagnostics of the trained models"
for s in pre_norm siamese_hybrid; do
  "$n" analyze --checkpoint "$work/sweep/runs/$s-lr1e-2-s0" --data data/kjv/shards --batch 16 --no-plots \
    --out "$work/analyze-$s" > "$work/analyze-$s.txt"
done
echo "== 5. tables and plots"
.venv/bin/python tools/repro_cpu_report.py "$work" "$out"
echo "repro_cpu: done in $(( ($(date +%s) - start) / 60 )) min; results in $out"
