#!/usr/bin/env bash
# Early stopping of a sweep (ASHA, docs/sweeps.md) on the built-in corpus: six learning rates
# of the tiny model, two of them obviously too small (1e-6, 1e-5), rungs at steps 10 and 30 of
# 40 with reduction 3.
#  1. both bad points stop at the first rung (10); the best point completes, and its final
#     validation loss is bitwise that of the same run without early stopping;
#  2. the table marks "stopped @ N" and reports the steps saved against the whole grid;
#  3. the same command again launches nothing; --resume-stopped runs the stopped points to the
#     end.
# Usage: sweep_asha.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR
set -euo pipefail
normlab=$1 src=$2 kjv=$3 python=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1
fail() { echo "FAIL: $*"; exit 1; }
common=(--set "data.train=$kjv/shards" --set "data.tokenizer=$kjv/tokenizer.model" --set train.steps=40
        --set eval.every=10 --set eval.batches=4 --set checkpoint.every=10 --set logging.every=1000)
sweep=("$normlab" sweep --config "$src/configs/tiny/lm.yaml" --scheme pre_norm
       --lr 1e-6,1e-5,1e-3,2e-3,4e-3,8e-3 "${common[@]}" --early-stop asha --reduction 3
       --jobs 2 --out "$work/sweep" --no-plots)
"${sweep[@]}" > "$work/sweep1.out" 2>&1 || { cat "$work/sweep1.out"; fail "the sweep"; }
status() {  # status and steps of one point, from summary.json
  "$python" -c "import json,sys; r={x['run']: x for x in json.load(open(sys.argv[1]))['runs']}[sys.argv[2]]; print(r['status'], r['steps'])" \
    "$work/sweep/summary.json" "$1"
}
for bad in pre_norm-lr1e-6-s0 pre_norm-lr1e-5-s0; do
  [ "$(status $bad)" = "stopped 10" ] || { cat "$work/sweep1.out"; fail "$bad: $(status $bad), expected stopped at the first rung (10)"; }
done
grep -q "stopped @ 10" "$work/sweep/summary.md" || fail "the table does not mark stopped points"
saved=$(grep -o "saving [0-9]* of the grid's 240 steps" "$work/sweep/summary.md" | awk '{print $2}')
[ -n "$saved" ] && [ "$saved" -ge 60 ] || fail "no or too few saved steps reported: '${saved}'"
grep -q "stopped early ($saved steps saved)" "$work/sweep1.out" || fail "the sweep's last line lacks the saved steps"
completed=$(grep -c '"status": "completed"' "$work/sweep/summary.json" || true)
[ "$completed" -ge 1 ] || fail "no point ran to the end"
best=$("$python" -c "import json; print(min((r for r in json.load(open('$work/sweep/summary.json'))['runs'] if r['status']=='completed'), key=lambda r: r['val_loss'])['run'])")
lr=$(sed 's/.*-lr\(.*\)-s0/\1/' <<< "$best")
"$normlab" train --config "$src/configs/tiny/lm.yaml" "${common[@]}" --set model.scheme=pre_norm \
  --set optimizer.lr=$lr --out "$work/plain" > "$work/plain.out" 2>&1 || { cat "$work/plain.out"; fail "plain run"; }
"$python" - "$work/plain/summary.json" "$work/sweep/runs/$best/summary.json" <<'PY' || fail "the best point's result changed"
import json, sys
a, b = (json.load(open(p))["final_val_loss"] for p in sys.argv[1:])
print(f"best point: final val loss {b!r} with early stopping, {a!r} without")
sys.exit(0 if a == b else 1)
PY
# 3. Again: nothing to do. Then --resume-stopped: the bad points run to the end.
"${sweep[@]}" > "$work/sweep2.out" 2>&1 || { cat "$work/sweep2.out"; fail "the second sweep"; }
! grep -q "^start\|^resume" "$work/sweep2.out" || { cat "$work/sweep2.out"; fail "the same sweep again launched runs"; }
"${sweep[@]}" --resume-stopped > "$work/sweep3.out" 2>&1 || { cat "$work/sweep3.out"; fail "--resume-stopped"; }
for p in pre_norm-lr1e-6-s0 pre_norm-lr1e-5-s0; do
  [ "$(status $p)" = "completed 40" ] || fail "$p after --resume-stopped: $(status $p)"
done
echo "PASS: ASHA stopped the two bad learning rates at step 10, saved $saved of 240 steps; the best point ($best) equals its plain run; --resume-stopped finished the stopped points"
