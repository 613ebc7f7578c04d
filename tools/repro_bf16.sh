#!/usr/bin/env bash
# The CPU-scale study in bf16, as one command (docs/results/bf16_cpu_scale.md): the study's model,
# tokens and learning rates (configs/sweeps/cpu_scale.yaml on configs/small/study.yaml) under
# train.precision = bf16 (CPU autocast), seed 0, for six models:
#   pre_norm, post_norm, deep_norm, siamese_hybrid, hyper 2xDHC, siamese_hybrid x 2xDHC.
# Then tools/repro_bf16_report.py writes the table of final validation perplexities beside the
# fp32 ones of docs/results/cpu_scale/sweep.csv and docs/results/hyper_cpu_scale/runs.csv.
# Resumable: run it again after an interruption and finished runs are kept. The runs use an
# installed copy of normlab (WORK/prefix), so rebuilding build/ meanwhile is safe.
# Env: NORMLAB_REPRO_DIR (default runs/repro_bf16), NORMLAB_JOBS (2), NORMLAB_REPRO_LRS (the
# learning rates, default the study's 1e-3,3e-3,1e-2,3e-2).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
work=${NORMLAB_REPRO_DIR:-$root/runs/repro_bf16}
jobs=${NORMLAB_JOBS:-2}
lrs=${NORMLAB_REPRO_LRS:-1e-3,3e-3,1e-2,3e-2}
start=$(date +%s)

tools/build.sh > /dev/null
tools/prepare_corpus.sh > /dev/null
cmake --install build --prefix "$work/prefix" > /dev/null
n=$work/prefix/bin/normlab
sweep=(sweep --sweep configs/sweeps/cpu_scale.yaml --lr "$lrs" --seed 0 --jobs "$jobs" --no-plots
       --set logging.every=10 --set train.precision=bf16)
# out_std_mult=1: the study's init (configs/1.3b/hyper_dhc2.yaml's), not the default sqrt_n. The
# base config's scheme is pre_norm, which refuses a hyper key off its default: hence model.scheme
# (and for siamese_dhc2).
dhc2=(--set model.scheme=hyper --set model.hyper.n=2 --set model.hyper.dynamic=true
      --set model.hyper.tanh=true --set model.hyper.out_std_mult=1)
siamese_dhc2=(--set model.scheme=siamese_hybrid --set model.siamese.hyper.n=2
              --set model.siamese.hyper.dynamic=true --set model.siamese.hyper.tanh=true)

echo "== 1. pre_norm, post_norm, deep_norm, siamese_hybrid"
"$n" "${sweep[@]}" --scheme pre_norm,post_norm,deep_norm,siamese_hybrid --out "$work/schemes"
echo "== 2. hyper 2xDHC"
"$n" "${sweep[@]}" --scheme hyper "${dhc2[@]}" --out "$work/hyper_dhc2"
echo "== 3. siamese_hybrid x 2xDHC"
"$n" "${sweep[@]}" --scheme siamese_hybrid "${siamese_dhc2[@]}" --out "$work/siamese_hybrid_dhc2"
echo "== 4. table"
"${NORMLAB_VENV:-$root/.venv}/bin/python" tools/repro_bf16_report.py "$work"
echo "repro_bf16: done in $(( ($(date +%s) - start) / 60 )) min ($(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'))"
