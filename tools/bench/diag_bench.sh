#!/usr/bin/env bash
# The cost of the built-in diagnostics (docs/diagnostics.md) during `normlab train` on
# configs/small/lm.yaml: one invocation trains the same run with diagnostics off, every
# EVERY steps, and every EVERY steps with the pruning curve, and prints from each run's
# metrics.jsonl the mean step time, the mean time of one diagnostics pass, and the overhead
# (diagnostics time over training time). Off, the diagnostics code is never called.
# Usage: tools/bench/diag_bench.sh [STEPS=20] [EVERY=10] [SCHEME=siamese_hybrid]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${NORMLAB_BUILD_DIR:-$root/build}
py=${NORMLAB_VENV:-$root/.venv}/bin/python
steps=${1:-20} every=${2:-10} scheme=${3:-siamese_hybrid}
"$root/tools/prepare_corpus.sh" >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run() {  # run NAME extra --set args...
  local name=$1; shift
  "$build/tools/normlab" train --config "$root/configs/small/lm.yaml" --set model.scheme="$scheme" \
    --set train.steps="$steps" --set eval.every=0 --set eval.batches=1 --set checkpoint.every=0 \
    --set logging.every=1000 "$@" --no-plots --out "$work/$name" > "$work/$name.out" 2>&1
}
run off
run diag --set diagnostics.every="$every"
run prune --set diagnostics.every="$every" --set diagnostics.pruning=true
"$py" - "$work" "$steps" "$every" "$scheme" <<'PY'
import json, statistics, sys
work, steps, every, scheme = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
print(f"diagnostics overhead, configs/small/lm.yaml ({scheme}), {steps} steps, diagnostics every {every} steps")
print(f"  {'run':<28} {'median step (s)':>16} {'one pass (s)':>13} {'passes':>7} {'overhead':>9}")
for name, label in (("off", "diagnostics off"), ("diag", f"every {every}"), ("prune", f"every {every} + pruning")):
    rows = [json.loads(l) for l in open(f"{work}/{name}/metrics.jsonl")]
    step = [r["step_seconds"] for r in rows[1:]]  # the first step warms up
    diag = [r["diagnostics_seconds"] for r in rows if "diagnostics_seconds" in r]
    overhead = sum(diag) / sum(r["step_seconds"] for r in rows)
    one = f"{statistics.mean(diag):.3f}" if diag else "-"
    print(f"  {label:<28} {statistics.median(step):>16.3f} {one:>13} {len(diag):>7} {100 * overhead:>8.1f}%")
PY
