#!/usr/bin/env bash
# FSDP's gradient reduce-scatter overlapped with the backward against waited for at once:
# `mpirun -n 2 normlab train` on configs/small/lm.yaml with distributed.overlap_reduce true and
# false, alternating REPEATS times, each run timing STEPS steps after WARMUP untimed ones. Per
# side: the median step time and the median time a step waited for communication
# (metrics.jsonl's comm_wait_seconds: gathers and reductions not hidden behind compute).
# Printed: step-time ratio (without / with overlap, > 1: overlap faster) and the fraction of the
# waited-for communication that overlapping hid, 1 - wait(with) / wait(without).
# Usage: tools/bench/fsdp_overlap.sh [STEPS=8] [REPEATS=2] [WARMUP=2] [extra --set KEY=VALUE ...]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${NORMLAB_BUILD_DIR:-$root/build}
py=${NORMLAB_VENV:-$root/.venv}/bin/python
steps=${1:-8} repeats=${2:-2} warmup=${3:-2}
shift $(($# < 3 ? $# : 3))
command -v mpirun >/dev/null || { echo "fsdp_overlap: no mpirun (tools/setup.sh installs Open MPI)"; exit 1; }
"$root/tools/prepare_corpus.sh" >/dev/null 2>&1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
for r in $(seq 1 "$repeats"); do
  for overlap in true false; do
    mpirun --oversubscribe --allow-run-as-root --bind-to none -x OMP_NUM_THREADS -n 2 \
      "$build/tools/normlab" train --config "$root/configs/small/lm.yaml" \
      --set data.train="$root/data/kjv/shards" --set data.tokenizer="$root/data/kjv/tokenizer.model" \
      --set train.steps=$((steps + warmup)) --set eval.every=0 --set checkpoint.every=0 \
      --set checkpoint.at_end=false --set logging.every=1000 \
      --set distributed.overlap_reduce=$overlap "$@" --out "$work/run-$overlap-$r" > "$work/log-$overlap-$r" 2>&1 \
      || { cat "$work/log-$overlap-$r"; echo "fsdp_overlap: the run with overlap_reduce=$overlap failed"; exit 1; }
  done
done
"$py" - "$work" "$warmup" "$repeats" <<'PY'
import json, statistics, sys
work, warmup, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def side(overlap):
    step, wait = [], []
    for r in range(1, repeats + 1):
        lines = [json.loads(l) for l in open(f"{work}/run-{overlap}-{r}/metrics.jsonl")]
        lines = [l for l in lines if "step_seconds" in l][warmup:]
        step += [l["step_seconds"] for l in lines]
        wait += [l["comm_wait_seconds"] for l in lines]
    return statistics.median(step), statistics.median(wait), len(step)
on, off = side("true"), side("false")
print(f"FSDP over 2 MPI ranks, configs/small/lm.yaml, {on[2]} timed steps per side")
print(f"  {'':24}{'step (s)':>10}{'comm wait (s)':>15}")
print(f"  {'overlap_reduce: true':24}{on[0]:10.3f}{on[1]:15.3f}")
print(f"  {'overlap_reduce: false':24}{off[0]:10.3f}{off[1]:15.3f}")
print(f"  step-time ratio (false / true): {off[0] / on[0]:.3f}")
hidden = 1 - on[1] / off[1] if off[1] > 0 else float("nan")
print(f"  communication hidden by overlapping: {hidden:.1%} of the {off[1]:.3f} s a step waited without it")
PY
