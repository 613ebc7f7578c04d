#!/usr/bin/env bash
# Hyper-Connections at CPU scale, as one command (docs/results/hyper_cpu_scale.md): the CPU-scale
# study's model, tokens, seeds and learning rates (configs/sweeps/cpu_scale.yaml on
# configs/small/study.yaml) for four models side by side:
#   pre_norm, hyper 2xDHC (n = 2, dynamic, tanh), siamese_hybrid, siamese_hybrid x 2xDHC
#   (model.siamese.hyper: its Pre-Norm-like stream as 2 dynamic hyper-streams),
# seed 0 (and seed 1 of every cell with NORMLAB_REPRO_SEEDS=0,1), a progress line every 10 steps.
# Then the tables and plots into docs/results/hyper_cpu_scale/
# (tools/repro_hyper_report.py).
# Resumable: run it again after an interruption and finished runs are kept. The runs use an
# installed copy of normlab (WORK/prefix), so rebuilding build/ meanwhile is safe.
# 64 minutes per seed on a shared 2-core machine (2026-12-05). Env: NORMLAB_REPRO_DIR (default runs/repro_hyper),
# NORMLAB_JOBS (2), NORMLAB_REPRO_SEEDS (0), NORMLAB_REPRO_PRECISION (train.precision, default
# auto; the published tables are fp32).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
work=${NORMLAB_REPRO_DIR:-$root/runs/repro_hyper}
jobs=${NORMLAB_JOBS:-2}
seeds=${NORMLAB_REPRO_SEEDS:-0}
precision=${NORMLAB_REPRO_PRECISION:-auto}  # auto: on a CPU with native bf16 the faster of bf16 and fp32 as measured there, else fp32
out=$root/docs/results/hyper_cpu_scale
start=$(date +%s)

tools/build.sh > /dev/null
tools/prepare_corpus.sh > /dev/null
cmake --install build --prefix "$work/prefix" > /dev/null
n=$work/prefix/bin/normlab
sweep=(sweep --sweep configs/sweeps/cpu_scale.yaml --seed "$seeds" --jobs "$jobs" --no-plots
       --set logging.every=10 --set train.precision="$precision")
# out_std_mult=1: the study's init (configs/1.3b/hyper_dhc2.yaml's), not the default sqrt_n. The
# base config's scheme is pre_norm, which refuses a hyper key off its default: hence model.scheme
# (and for siamese_dhc2).
dhc2=(--set model.scheme=hyper --set model.hyper.n=2 --set model.hyper.dynamic=true
      --set model.hyper.tanh=true --set model.hyper.out_std_mult=1)
siamese_dhc2=(--set model.scheme=siamese_hybrid --set model.siamese.hyper.n=2
              --set model.siamese.hyper.dynamic=true --set model.siamese.hyper.tanh=true)

echo "== 1. pre_norm"
"$n" "${sweep[@]}" --scheme pre_norm --out "$work/pre_norm"
echo "== 2. hyper 2xDHC"
"$n" "${sweep[@]}" --scheme hyper "${dhc2[@]}" --out "$work/hyper_dhc2"
echo "== 3. siamese_hybrid"
"$n" "${sweep[@]}" --scheme siamese_hybrid --out "$work/siamese_hybrid"
echo "== 4. siamese_hybrid x 2xDHC"
"$n" "${sweep[@]}" --scheme siamese_hybrid "${siamese_dhc2[@]}" --out "$work/siamese_hybrid_dhc2"
echo "== 5. tables and plots"
.venv/bin/python tools/repro_hyper_report.py "$work" "$out"
echo "repro_hyper: done in $(( ($(date +%s) - start) / 60 )) min; results in $out"
