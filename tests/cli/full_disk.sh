#!/usr/bin/env bash
# A full disk during a checkpoint save, as a user meets it (docs/reliability.md): on an 11 MB
# tmpfs the second save fails with a clear error naming the file, the previous checkpoint
# stays whole, no temporary folder is left, and after space is freed --resume finishes the
# run. Needs permission to mount a tmpfs; without it the test exits 77 (CTest: skipped).
# Usage: full_disk.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR
set -euo pipefail
normlab=$1 src=$2 kjv=$3 work=$5
rm -rf "$work" && mkdir -p "$work"
args=(--config "$src/configs/tiny/lm.yaml" --set "data.train=$kjv/shards" --set "data.tokenizer=$kjv/tokenizer.model"
      --set eval.every=0 --set logging.every=1000 --set checkpoint.every=1 --set checkpoint.keep=2)
fail() { echo "FAIL: $*"; exit 1; }

full=$work/full
mkdir -p "$full"
if ! mount -t tmpfs -o size=11m tmpfs "$full" 2>/dev/null; then
  echo "full disk: no permission to mount a tmpfs here: skipped"
  exit 77
fi
trap 'umount "$full" 2>/dev/null || true' EXIT
run=$full/run
rc=0; "$normlab" train "${args[@]}" --out "$run" --set train.steps=10 > "$work/full.out" 2>&1 || rc=$?
[ $rc -ne 0 ] || fail "a run that cannot save its second checkpoint exited 0"
grep -q "No space left on device" "$work/full.out" || { cat "$work/full.out"; fail "the error does not say the disk is full"; }
grep -q "step-00000002.*safetensors" "$work/full.out" || { cat "$work/full.out"; fail "the error does not name the file"; }
[ "$(ls -d "$run"/checkpoints/step-* | xargs -n1 basename | tr '\n' ' ')" = "step-00000001 " ] \
  || { ls -la "$run/checkpoints"; fail "the checkpoint folder holds more than the previous checkpoint"; }
"$normlab" checkpoint verify --checkpoint "$run" > /dev/null || fail "the previous checkpoint does not verify"
echo "full disk: exit $rc, '$(grep -o 'error: .*' "$work/full.out" | head -1 | cut -c1-160)'"
mount -o remount,size=64m "$full"
"$normlab" train "${args[@]}" --out "$run" --set train.steps=4 --resume > "$work/full2.out" 2>&1 \
  || { cat "$work/full2.out"; fail "resume after freeing space failed"; }
grep -q "resumed from .*step-00000001 at step 1" "$run/train.log" || fail "did not resume from step 1"
echo "full disk: after freeing space, resumed from step 1 and finished"
echo PASS
