#!/usr/bin/env bash
# Crash safety of checkpoints as a user meets it (docs/reliability.md):
#  1. kill -9 while a checkpoint is being written (caught in the act: its temporary folder
#     exists), five times: every complete checkpoint still verifies, and --resume continues;
#  2. a flipped bit in the newest checkpoint: `normlab checkpoint verify` names the file, and
#     --resume sets it aside and resumes from the one before;
#  3. kill -9 during an export over an existing one (a 100 MB model, five times): the export
#     folder always holds the whole previous export, and the next export clears the leftovers;
# (A full disk is tests/cli/full_disk.sh.)
# Usage: crash_safety.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR
set -euo pipefail
normlab=$1 src=$2 kjv=$3 python=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
args=(--config "$src/configs/tiny/lm.yaml" --set "data.train=$kjv/shards" --set "data.tokenizer=$kjv/tokenizer.model"
      --set eval.every=0 --set logging.every=1000 --set checkpoint.every=1 --set checkpoint.keep=2)
fail() { echo "FAIL: $*"; exit 1; }

# ---- 1. kill -9 during checkpoint writes ----------------------------------------------------
run=$work/killed
mid_save=0
for round in 1 2 3 4 5; do
  resume=(); [ -d "$run/checkpoints" ] && resume=(--resume)
  "$normlab" train "${args[@]}" --out "$run" --set train.steps=100000 "${resume[@]}" > "$work/kill$round.out" 2>&1 &
  pid=$!
  # Wait for one complete checkpoint of this round, then for the next save to start.
  before=$(ls -d "$run"/checkpoints/step-???????? 2>/dev/null | tail -1 || true)
  for _ in $(seq 1 600); do
    now=$(ls -d "$run"/checkpoints/step-???????? 2>/dev/null | tail -1 || true)
    [ -n "$now" ] && [ "$now" != "$before" ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/kill$round.out"; fail "round $round: train exited early"; }
    sleep 0.1
  done
  caught=0
  for _ in $(seq 1 20000); do
    if compgen -G "$run/checkpoints/step-*.tmp-*" > /dev/null; then kill -9 "$pid"; caught=1; break; fi
  done
  [ $caught = 1 ] || kill -9 "$pid"
  wait "$pid" 2>/dev/null || true
  if compgen -G "$run/checkpoints/step-*.tmp-*" > /dev/null; then mid_save=$((mid_save + 1)); fi
  "$normlab" checkpoint verify --checkpoint "$run" > "$work/verify$round.out" 2>&1 \
    || { cat "$work/verify$round.out"; fail "round $round: a checkpoint does not verify after kill -9"; }
done
[ $mid_save -ge 3 ] || fail "only $mid_save of 5 kills landed during a checkpoint write"
last=$(ls -d "$run"/checkpoints/step-???????? | tail -1)
step=$(basename "$last" | sed 's/step-0*//')
"$normlab" train "${args[@]}" --out "$run" --set train.steps=$((step + 2)) --resume > "$work/kill-resume.out" 2>&1 \
  || { cat "$work/kill-resume.out"; fail "resume after kill -9 failed"; }
grep -q "resumed from .*step-0*$step at step $step" "$run/train.log" || fail "did not resume from $(basename "$last")"
! compgen -G "$run/checkpoints/step-*.tmp-*" > /dev/null || fail "a temporary folder survived the next save"
echo "kill -9: $mid_save of 5 kills during a checkpoint write; every checkpoint verified; resumed at step $step"

# ---- 2. a flipped bit -----------------------------------------------------------------------
run=$work/flipped
"$normlab" train "${args[@]}" --out "$run" --set train.steps=4 > "$work/flip1.out" 2>&1 || { cat "$work/flip1.out"; fail "train"; }
"$python" - "$run/checkpoints/step-00000004/model.safetensors" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0x08
open(p, "wb").write(b)
PY
rc=0; "$normlab" checkpoint verify --checkpoint "$run" > "$work/flip-verify.out" 2>&1 || rc=$?
[ $rc = 1 ] || { cat "$work/flip-verify.out"; fail "verify exit $rc on a flipped bit, expected 1"; }
grep -q "step-00000004: CORRUPTED: .*model.safetensors: checksum mismatch" "$work/flip-verify.out" \
  || { cat "$work/flip-verify.out"; fail "verify does not name the corrupted file"; }
grep -q "step-00000003: ok" "$work/flip-verify.out" || fail "verify does not pass the intact checkpoint"
"$normlab" train "${args[@]}" --out "$run" --set train.steps=6 --resume > "$work/flip2.out" 2>&1 \
  || { cat "$work/flip2.out"; fail "resume past a corrupted checkpoint failed"; }
grep -q "not resuming from a corrupted checkpoint" "$run/train.log" || fail "no corruption report in train.log"
grep -q "resumed from .*step-00000003 at step 3" "$run/train.log" || fail "did not resume from step 3"
[ -d "$run/checkpoints/step-00000004.corrupted" ] || fail "the corrupted checkpoint was not set aside"
"$normlab" checkpoint verify --checkpoint "$run" > /dev/null || fail "checkpoints after the resume do not verify"
echo "bit flip: verify named model.safetensors; resume set step 4 aside and resumed from step 3"

# ---- 3. kill -9 during an export ------------------------------------------------------------
run=$work/export-run
"$normlab" train "${args[@]}" --out "$run" --set train.steps=1 --set model.d_model=512 --set model.n_layers=8 \
  --set model.n_heads=8 --set model.d_ff=1376 > "$work/export-train.out" 2>&1 || { cat "$work/export-train.out"; fail "train"; }
out=$work/export
"$normlab" export --checkpoint "$run" --out "$out" > "$work/export1.out" 2>&1 || { cat "$work/export1.out"; fail "export"; }
md5=$(md5sum < "$out/model.safetensors")
cfg_md5=$(md5sum < "$out/config.json")
mid_export=0
for round in 1 2 3 4 5; do
  "$normlab" export --checkpoint "$run" --out "$out" > "$work/export-kill$round.out" 2>&1 &
  pid=$!
  for _ in $(seq 1 200000); do
    if compgen -G "$out.tmp-*/model.safetensors" > /dev/null; then kill -9 "$pid"; break; fi
    kill -0 "$pid" 2>/dev/null || break
  done
  wait "$pid" 2>/dev/null || true
  compgen -G "$out.tmp-*" > /dev/null && mid_export=$((mid_export + 1))
  [ "$(md5sum < "$out/model.safetensors")" = "$md5" ] && [ "$(md5sum < "$out/config.json")" = "$cfg_md5" ] \
    || fail "round $round: the export folder is not the whole previous export after kill -9"
done
[ $mid_export -ge 1 ] || fail "no kill landed during an export write (0 of 5)"
"$normlab" export --checkpoint "$run" --out "$out" > "$work/export2.out" 2>&1 || { cat "$work/export2.out"; fail "export after the kills"; }
! compgen -G "$out.tmp-*" > /dev/null || fail "the next export left the killed ones' temporary folders"
[ "$(md5sum < "$out/model.safetensors")" = "$md5" ] || fail "the new export differs from the first"
echo "export: $mid_export of 5 kills during an export write; the previous export stayed whole each time"

echo PASS
