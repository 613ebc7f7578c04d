#!/usr/bin/env bash
# Crash safety of checkpoints and exports as a user meets it (docs/reliability.md). The crashes
# are deterministic: NORMLAB_FAULT=abort_after_bytes:WRITER:N (a test-only hook of the CLI)
# makes the process SIGKILL itself once N bytes of checkpoint (or export) files are written, so
# every round dies at a chosen byte of a chosen file, exactly like a `kill -9` that landed there.
#  1. a crash inside each file of a checkpoint (half of model.safetensors, all of it but not yet
#     renamed, half of the optimizer, of config.yaml, of state.json) and inside the third save of
#     a process: each time the temporary folder holds exactly the bytes written, every complete
#     checkpoint verifies, the next save removes the leftover, and --resume continues; then one
#     real `kill -9` from outside at whatever moment it lands (commit, prune, training), after
#     which every complete checkpoint still verifies;
#  2. a flipped bit in the newest checkpoint: `normlab checkpoint verify` names the file, and
#     --resume sets it aside and resumes from the one before;
#  3. a crash inside model.safetensors and inside config.json of an export over an existing
#     one (in a folder that also holds a file of the user's): the folder's files are still the
#     whole previous export and the user's file, the crashed export's bytes lie only in its
#     staging folder inside it, and the next export clears that;
#  4. a malformed NORMLAB_FAULT stops the command with an error naming the variable.
# (A full disk is tests/cli/full_disk.sh.)
# Usage: crash_safety.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR
set -euo pipefail
normlab=$1 src=$2 kjv=$3 python=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
args=(--config "$src/configs/tiny/lm.yaml" --set "data.train=$kjv/shards" --set "data.tokenizer=$kjv/tokenizer.model"
      --set eval.every=0 --set logging.every=1000 --set checkpoint.every=1 --set checkpoint.keep=2)
fail() { echo "FAIL: $*"; exit 1; }
size() { stat -c %s "$1"; }
# The step of the newest complete checkpoint of $run (0: none).
newest_step() { local d; d=$(cd "$run/checkpoints" && ls -d step-???????? 2>/dev/null | tail -1); echo "${d#step-}" | sed 's/^0*//;s/^$/0/'; }
# Every file of folder $1 (hidden ones too) as "name:bytes", sorted, on one line.
listing() { (cd "$1" && find . -maxdepth 1 -type f -printf '%f:%s\n' | LC_ALL=C sort | tr '\n' ' '); }
# The digest of every file of folder $1 (hidden ones too; not its subfolders), one per line.
digests() { (cd "$1" && find . -maxdepth 1 -type f -printf '%f\n' | LC_ALL=C sort | xargs md5sum); }

# ---- 1. crashes inside checkpoint writes ------------------------------------------------------
run=$work/killed
# Two checkpoints, with the train.steps of the rounds below (config.yaml holds it).
rc=0; "$normlab" train "${args[@]}" --out "$run" --set train.steps=1000 --stop-after 2 > "$work/first.out" 2>&1 || rc=$?
[ "$rc" = 4 ] || { cat "$work/first.out"; fail "train --stop-after 2: exit $rc"; }
"$normlab" checkpoint verify --checkpoint "$run" > "$work/verify0.out" 2>&1 \
  || { cat "$work/verify0.out"; fail "the checkpoints of an uninterrupted run do not verify"; }
ref=$run/checkpoints/step-00000002  # the files of every checkpoint of this run (state.json: +-a few bytes)
M=$(size "$ref/model.safetensors") O=$(size "$ref/optimizer.safetensors")
C=$(size "$ref/config.yaml") J=$(size "$ref/state.json")
S=$((M + O + C + J))
pid=0
# crash ROUND BYTES: train --resume until the fault kills it at byte BYTES of its checkpoint
# writes; it must die by SIGKILL leaving exactly one temporary folder, its own, and every
# complete checkpoint must verify.
crash() {
  local round=$1 bytes=$2 rc=0
  NORMLAB_FAULT=abort_after_bytes:checkpoint:$bytes "$normlab" train "${args[@]}" --out "$run" \
    --set train.steps=1000 --resume > "$work/crash$round.out" 2>&1 &
  pid=$!
  wait "$pid" 2>/dev/null || rc=$?
  [ "$rc" = 137 ] || { cat "$work/crash$round.out"; fail "round $round: exit $rc, expected 137 (SIGKILL at byte $bytes)"; }
  tmps=$(cd "$run/checkpoints" && ls -d step-*.tmp-* 2>/dev/null | tr '\n' ' ')
  [ "$tmps" = "$(basename "$(ls -d "$run"/checkpoints/step-????????.tmp-"$pid")") " ] \
    || fail "round $round: temporary folders '$tmps', expected exactly the killed process's ($pid)"
  tmp=$(ls -d "$run"/checkpoints/step-????????.tmp-"$pid")
  # The log is written through: the killed process's lines are in train.log (each round
  # resumes, so each added its "resumed from" line; a buffered log lost them all).
  [ "$(grep -c "resumed from " "$run/train.log")" = "$round" ] \
    || fail "round $round: train.log lost the killed process's lines: $(wc -c < "$run/train.log") bytes"
  "$normlab" checkpoint verify --checkpoint "$run" > "$work/verify$round.out" 2>&1 \
    || { cat "$work/verify$round.out"; fail "round $round: a complete checkpoint does not verify"; }
}
# expect ROUND STEP LISTING: the killed save was the one of step STEP, and its temporary folder
# holds exactly these files ("name:bytes"; a partial file still has its temporary name).
expect() {
  [ "$(basename "$tmp")" = "$(printf 'step-%08d.tmp-%s' "$2" "$pid")" ] \
    || fail "round $1: died saving $(basename "$tmp"), expected step $2"
  [ "$(listing "$tmp")" = "$3 " ] || fail "round $1: the temporary folder holds '$(listing "$tmp")', expected '$3'"
}
# Rounds 1-5 resume from step 2 and die in their first save (step 3), inside each file in turn.
crash 1 $((M / 2));  expect 1 3 ".model.safetensors.tmp.$pid:$((M / 2))"
crash 2 $M;          expect 2 3 ".model.safetensors.tmp.$pid:$M"   # every byte written, not renamed
crash 3 $((M + O / 2))
expect 3 3 ".optimizer.safetensors.tmp.$pid:$((O / 2)) model.safetensors:$M"
crash 4 $((M + O + C / 2))
expect 4 3 ".config.yaml.tmp.$pid:$((C / 2)) model.safetensors:$M optimizer.safetensors:$O"
crash 5 $((M + O + C + J / 2))
expect 5 3 ".state.json.tmp.$pid:$((J / 2)) config.yaml:$C model.safetensors:$M optimizer.safetensors:$O"
# Round 6: two whole saves (steps 3 and 4), then half-way through the third one's model file.
crash 6 $((2 * S + M / 2))
written=0
for f in "$run"/checkpoints/step-00000003/* "$run"/checkpoints/step-00000004/*; do written=$((written + $(size "$f"))); done
expect 6 5 ".model.safetensors.tmp.$pid:$((2 * S + M / 2 - written))"
# Round 7: a real kill -9 from outside, at whatever moment it lands once a new checkpoint exists.
"$normlab" train "${args[@]}" --out "$run" --set train.steps=100000 --resume > "$work/kill.out" 2>&1 &
pid=$!
for _ in $(seq 1 1200); do  # until a checkpoint of step 6 or later is complete (up to 2 min)
  [ "$(newest_step)" -ge 6 ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/kill.out"; fail "round 7: train exited early"; }
  sleep 0.1
done
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
[ "$(grep -c "resumed from " "$run/train.log")" = 7 ] || fail "round 7: train.log lost the lines of the process killed with kill -9"
"$normlab" checkpoint verify --checkpoint "$run" > "$work/verify7.out" 2>&1 \
  || { cat "$work/verify7.out"; fail "round 7: a checkpoint does not verify after kill -9"; }
step=$(newest_step)
[ "$step" -ge 6 ] || fail "round 7: the newest checkpoint is step $step"
last=$run/checkpoints/$(printf 'step-%08d' "$step")
"$normlab" train "${args[@]}" --out "$run" --set train.steps=$((step + 2)) --resume > "$work/kill-resume.out" 2>&1 \
  || { cat "$work/kill-resume.out"; fail "resume after the crashes failed"; }
grep -q "resumed from .*step-0*$step at step $step" "$run/train.log" || fail "did not resume from $(basename "$last")"
! compgen -G "$run/checkpoints/step-*.tmp-*" > /dev/null || fail "a temporary folder survived the next save"
"$normlab" checkpoint verify --checkpoint "$run" > /dev/null || fail "checkpoints after the resume do not verify"
echo "checkpoint crashes: 6 of 6 at the chosen byte (model, model unrenamed, optimizer, config, state, third save), kill -9 once; every checkpoint verified; resumed at step $step"

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

# ---- 3. crashes during an export ------------------------------------------------------------
run=$work/export-run
"$normlab" train "${args[@]}" --out "$run" --set train.steps=1 > "$work/export-train.out" 2>&1 \
  || { cat "$work/export-train.out"; fail "train"; }
out=$work/export
mkdir -p "$out" && echo "my notes" > "$out/notes.txt"
"$normlab" export --checkpoint "$run" --out "$out" > "$work/export1.out" 2>&1 || { cat "$work/export1.out"; fail "export"; }
whole=$(digests "$out")  # every file of the export, and the user's, with its digest
grep -q notes.txt <<< "$whole" || fail "the export removed the user's notes.txt"
E=$(size "$out/model.safetensors") G=$(size "$out/config.json")
round=0
for bytes in $((E / 2)) $((E + G / 2)); do
  round=$((round + 1))
  rc=0
  NORMLAB_FAULT=abort_after_bytes:export:$bytes "$normlab" export --checkpoint "$run" --out "$out" \
    > "$work/export-crash$round.out" 2>&1 &
  pid=$!
  wait "$pid" 2>/dev/null || rc=$?
  [ "$rc" = 137 ] || { cat "$work/export-crash$round.out"; fail "export round $round: exit $rc, expected 137"; }
  [ "$(digests "$out")" = "$whole" ] || fail "export round $round: the export folder's files are not the whole previous export"
  [ -d "$out/.normlab.tmp-$pid" ] || fail "export round $round: no staging folder $out/.normlab.tmp-$pid"
  case $round in
    1) want=".model.safetensors.tmp.$pid:$((E / 2)) " ;;
    2) want=".config.json.tmp.$pid:$((G / 2)) model.safetensors:$E " ;;
  esac
  [ "$(listing "$out/.normlab.tmp-$pid")" = "$want" ] || fail "export round $round: the staging folder holds '$(listing "$out/.normlab.tmp-$pid")'"
done
"$normlab" export --checkpoint "$run" --out "$out" > "$work/export2.out" 2>&1 || { cat "$work/export2.out"; fail "export after the crashes"; }
! compgen -G "$out/.normlab.tmp-*" > /dev/null || fail "the next export left the crashed ones' staging folders"
# The new export's files, beside the first one's kept as NAME.prev (the output contract), with
# the folder's ledger of them left out.
fresh() { grep -v -e '\.prev$' -e ' \.normlab-outputs\.json$'; }
[ "$(digests "$out" | fresh)" = "$(fresh <<< "$whole")" ] || fail "the new export differs from the first (or the user's file changed)"
[ "$(md5sum < "$out/model.safetensors.prev")" = "$(md5sum < "$out/model.safetensors")" ] || fail "the first export's model.safetensors is not kept as model.safetensors.prev"
echo "export: 2 of 2 crashes inside model.safetensors and config.json; the previous export and the user's file stayed whole each time"

# ---- 4. a malformed NORMLAB_FAULT -----------------------------------------------------------------
for bad in abort_after_bytes:checkpoint:x abort_after_bytes:model:10 raise_at_step:SIGHUP:3 raise_at_step:SIGTERM:0 crash; do
  rc=0; NORMLAB_FAULT=$bad "$normlab" export --checkpoint "$run" --out "$work/bad" > "$work/bad.out" 2>&1 || rc=$?
  [ "$rc" = 1 ] && grep -qF "NORMLAB_FAULT='$bad'" "$work/bad.out" \
    || { cat "$work/bad.out"; fail "NORMLAB_FAULT=$bad: exit $rc, expected 1 and an error naming the variable"; }
  [ ! -e "$work/bad" ] || fail "NORMLAB_FAULT=$bad: the command ran"
done
echo "malformed NORMLAB_FAULT: rejected ($(grep -o "NORMLAB_FAULT=.*" "$work/bad.out" | cut -c1-100)...)"

echo PASS
