#!/usr/bin/env bash
# What a user already has survives every command that writes (docs/reliability.md, "What
# survives"): for each command with an output, a file of the user's (and, for the exports, a
# .git folder and a README.md, as in a git clone of a model repository) placed in its output
# folder beforehand is still there, unchanged, afterwards, or the command refuses with a clear
# message and changes nothing; --out naming an existing regular file is an error that names it
# and leaves the file as it was; `tokenizer train` states the smallest vocabulary its text
# allows, and that size trains. Self-contained (a small generated text, a model trained for 2
# steps): no corpus fixture; a few seconds.
# Usage: output_safety.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR (CORPUS_DIR unused)
set -euo pipefail
normlab=$1 src=$2 work=$5
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }

# A text of 300 documents (paragraphs of 10 lines) over 24 words, so that a tokenizer of 300
# pieces, 2 steps of 8 x 64 tokens and a validation split of one batch fit it.
awk 'BEGIN { srand(7); split("the of and to in a is that for it as was with be by on not he this are or his from at which", w);
             for (l = 0; l < 3000; l++) { s = ""; for (i = 0; i < 12; i++) s = s (i ? " " : "") w[int(rand() * 24) + 1]; print s;
                                          if (l % 10 == 9) print "" } }' \
  > "$work/text.txt"

# plant DIR: the user's files: notes.txt, README.md and a .git folder.
plant() {
  mkdir -p "$1/.git/refs"
  echo "my notes" > "$1/notes.txt"
  echo "# my model" > "$1/README.md"
  echo "ref: refs/heads/main" > "$1/.git/HEAD"
}
# kept DIR WHAT: the planted files are all there, unchanged.
kept() {
  [ "$(cat "$1/notes.txt" 2>/dev/null)" = "my notes" ] || fail "$2: notes.txt of $1 is gone or changed"
  [ "$(cat "$1/README.md" 2>/dev/null)" = "# my model" ] || fail "$2: README.md of $1 is gone or changed"
  [ "$(cat "$1/.git/HEAD" 2>/dev/null)" = "ref: refs/heads/main" ] || fail "$2: .git of $1 is gone or changed"
  [ -d "$1/.git/refs" ] || fail "$2: .git/refs of $1 is gone"
}
# state PATH: everything at PATH (a file, or a folder's whole tree) with sizes, times and digests.
state() {
  if [ -d "$1" ]; then
    (cd "$1" && find . -printf '%P|%y|%s|%T@\n' | LC_ALL=C sort && find . -type f -exec md5sum {} + | LC_ALL=C sort)
  else
    stat -c '%F|%s|%Y' "$1" && md5sum < "$1"
  fi
}
# refused WHAT PATH PATTERN CMD...: CMD fails (exit 1), its error matches PATTERN and names
# PATH, and nothing at PATH changed.
refused() {
  local what=$1 path=$2 pattern=$3 before rc=0
  shift 3
  before=$(state "$path")
  "$@" > "$work/refused.out" 2>&1 || rc=$?
  [ "$rc" = 1 ] || { cat "$work/refused.out"; fail "$what: exit $rc, expected 1 (refused)"; }
  grep -qF -- "$path" "$work/refused.out" || { cat "$work/refused.out"; fail "$what: the error does not name $path"; }
  grep -qE -- "$pattern" "$work/refused.out" || { cat "$work/refused.out"; fail "$what: the error does not say '$pattern'"; }
  [ "$(state "$path")" = "$before" ] || fail "$what: $path changed although the command refused"
}
# a_file NAME: a regular file of the user's where a command is told to write a folder.
a_file() { echo "a file of mine" > "$work/$1"; echo "$work/$1"; }
notdir="exists and is a file"
ok() { local what=$1; shift; "$@" > "$work/ok.out" 2>&1 || { cat "$work/ok.out"; fail "$what"; }; }

# ---- tokenizer train --------------------------------------------------------------------------
plant "$work/tok"
ok "tokenizer train" "$normlab" tokenizer train --input "$work/text.txt" --vocab-size 300 --out "$work/tok"
kept "$work/tok" "tokenizer train"
[ -s "$work/tok/tokenizer.model" ] && [ -s "$work/tok/tokenizer.vocab" ] || fail "tokenizer train wrote no tokenizer"
f=$(a_file tok-file)
refused "tokenizer train --out FILE" "$f" "$notdir" \
  "$normlab" tokenizer train --input "$work/text.txt" --vocab-size 300 --out "$f"
# The smallest vocabulary: below it a clear message states it, and that size trains.
rc=0; "$normlab" tokenizer train --input "$work/text.txt" --vocab-size 261 --out "$work/tok-small" > "$work/small.out" 2>&1 || rc=$?
[ "$rc" = 1 ] || { cat "$work/small.out"; fail "tokenizer train --vocab-size 261: exit $rc, expected 1"; }
min=$(grep -oE "at least [0-9]+" "$work/small.out" | head -1 | grep -oE "[0-9]+" || true)
[ -n "$min" ] || { cat "$work/small.out"; fail "the too-small vocabulary's error states no minimum"; }
grep -q "byte fallback" "$work/small.out" || { cat "$work/small.out"; fail "the error does not say why (byte fallback)"; }
! grep -qi "vs\.\? [0-9]\|required_chars\|character_coverage option" "$work/small.out" \
  || { cat "$work/small.out"; fail "SentencePiece's own message leaks through"; }
[ ! -e "$work/tok-small" ] || fail "a refused tokenizer train created its --out"
ok "tokenizer train at the stated minimum $min" \
  "$normlab" tokenizer train --input "$work/text.txt" --vocab-size "$min" --out "$work/tok-min"
rc=0; "$normlab" tokenizer train --input "$work/text.txt" --vocab-size $((min - 1)) --out "$work/tok-small" > "$work/small2.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "at least $min" "$work/small2.out" || { cat "$work/small2.out"; fail "--vocab-size $((min - 1)): not refused with minimum $min"; }
rc=0; "$normlab" tokenizer train --input "$work/text.txt" --vocab-size 100 --out "$work/tok-small" > "$work/small3.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "at least 26[0-9]" "$work/small3.out" && grep -q "byte fallback" "$work/small3.out" \
  || { cat "$work/small3.out"; fail "--vocab-size 100: no clear minimum"; }
echo "tokenizer train: kept the user's files; a file as --out refused; minimum vocabulary $min stated ($(grep -o 'error: .*' "$work/small.out" | cut -c1-150)...) and trains"
tok=$work/tok/tokenizer.model

# ---- data prepare -----------------------------------------------------------------------------
plant "$work/shards-mine"
refused "data prepare into a non-empty folder" "$work/shards-mine" "exists and is not empty" \
  "$normlab" data prepare --tokenizer "$tok" --input "$work/text.txt" --out "$work/shards-mine"
refused "data prepare --overwrite over the user's files" "$work/shards-mine" "notes.txt" \
  "$normlab" data prepare --tokenizer "$tok" --input "$work/text.txt" --out "$work/shards-mine" --overwrite
f=$(a_file shards-file)
refused "data prepare --out FILE" "$f" "$notdir" "$normlab" data prepare --tokenizer "$tok" --input "$work/text.txt" --out "$f"
refused "data prepare --overwrite --out FILE" "$f" "$notdir" \
  "$normlab" data prepare --tokenizer "$tok" --input "$work/text.txt" --out "$f" --overwrite
shards=$work/shards
ok "data prepare" "$normlab" data prepare --tokenizer "$tok" --input "$work/text.txt" --out "$shards" --val-fraction 0.1
ok "data prepare --overwrite of its own folder" \
  "$normlab" data prepare --tokenizer "$tok" --input "$work/text.txt" --out "$shards" --val-fraction 0.1 --overwrite
echo "data prepare: refused a folder of the user's (also with --overwrite, naming notes.txt) and a file; replaced its own"

# ---- train ------------------------------------------------------------------------------------
args=(--config "$src/configs/tiny/lm.yaml" --set "data.train=$shards" --set "data.tokenizer=$tok"
      --set model.vocab_size=320 --set eval.every=0 --set logging.every=1000 --set train.steps=2)
plant "$work/run"
ok "train" "$normlab" train "${args[@]}" --out "$work/run"
kept "$work/run" "train"
[ -d "$work/run/checkpoints" ] || fail "train wrote no checkpoint"
f=$(a_file run-file)
refused "train --out FILE" "$f" "$notdir" "$normlab" train "${args[@]}" --out "$f"
echo "train: kept the user's files; a file as --out refused"

# ---- export, every format -----------------------------------------------------------------------
for format in normlab hf olmo; do
  out=$work/export-$format
  plant "$out"
  echo '{"stale": true}' > "$out/config.json"  # a file the export writes: replaced
  [ "$format" != olmo ] || echo "an earlier model.pt" > "$out/model.pt"  # not written without --pt
  ok "export --format $format" "$normlab" export --format "$format" --checkpoint "$work/run" --out "$out"
  kept "$out" "export --format $format"
  if [ "$format" = olmo ]; then
    [ "$(cat "$out/model.pt")" = "an earlier model.pt" ] || fail "export --format olmo changed model.pt without --pt"
    grep -q "model.pt is from before" "$work/ok.out" || { cat "$work/ok.out"; fail "export --format olmo did not say model.pt is from before"; }
  fi
  [ -s "$out/model.safetensors" ] || fail "export --format $format wrote no model.safetensors"
  if [ "$format" != olmo ]; then
    ! grep -q stale "$out/config.json" || fail "export --format $format did not replace config.json"
  fi
  ! compgen -G "$out/.normlab.tmp-*" > /dev/null || fail "export --format $format left its staging folder"
  f=$(a_file export-file-$format)
  refused "export --format $format --out FILE" "$f" "$notdir" \
    "$normlab" export --format "$format" --checkpoint "$work/run" --out "$f"
  # Exported again over itself (and the user's files): the same files, the user's kept.
  ok "export --format $format again" "$normlab" export --format "$format" --checkpoint "$work/run" --out "$out"
  kept "$out" "export --format $format again"
done
grep -q '"format": "normlab"' "$work/export-normlab/config.json" || fail "the normlab export's config.json is not the export's"
grep -q '"model_type": "normlab"' "$work/export-hf/config.json" || fail "the hf export's config.json is not the export's"
echo "export: normlab, hf and olmo kept notes.txt, README.md and .git, replaced config.json; a file as --out refused"

# ---- import, checkpoint consolidate -------------------------------------------------------------
plant "$work/imported"
ok "import" "$normlab" import --from olmo --checkpoint "$work/export-olmo" \
  --config "$work/export-olmo/normlab_config.yaml" --out "$work/imported"
kept "$work/imported" "import"
f=$(a_file import-file)
refused "import --out FILE" "$f" "$notdir" \
  "$normlab" import --from olmo --checkpoint "$work/export-olmo" --config "$work/export-olmo/normlab_config.yaml" --out "$f"
ckpt=$(ls -d "$work"/run/checkpoints/step-* | tail -1)
plant "$work/consolidated"
ok "checkpoint consolidate" "$normlab" checkpoint consolidate --checkpoint "$ckpt" --out "$work/consolidated"
kept "$work/consolidated" "checkpoint consolidate"
f=$(a_file consolidate-file)
refused "checkpoint consolidate --out FILE" "$f" "$notdir" "$normlab" checkpoint consolidate --checkpoint "$ckpt" --out "$f"
echo "import, checkpoint consolidate: kept the user's files; a file as --out refused"

# ---- analyze, eval -----------------------------------------------------------------------------
plant "$work/analysis"
ok "analyze" "$normlab" analyze --checkpoint "$work/run" --data "$shards" --batch 2 --no-plots --out "$work/analysis"
kept "$work/analysis" "analyze"
f=$(a_file analyze-file)
refused "analyze --out FILE" "$f" "$notdir" "$normlab" analyze --checkpoint "$work/run" --data "$shards" --batch 2 --no-plots --out "$f"
# eval --out names a file: a new one, or an earlier eval's results, which it replaces; another
# file of the user's, or a folder, is refused.
ok "eval --out" "$normlab" eval --checkpoint "$work/run" --data "$shards" --batches 1 --out "$work/result.json"
ok "eval --out over its own results" "$normlab" eval --checkpoint "$work/run" --data "$shards" --batches 1 --out "$work/result.json"
grep -q '"perplexity"' "$work/result.json" || fail "eval --out wrote no results"
f=$(a_file eval-file)
refused "eval --out FILE of the user's" "$f" "not the results of a normlab eval" \
  "$normlab" eval --checkpoint "$work/run" --data "$shards" --batches 1 --out "$f"
plant "$work/eval-dir"
refused "eval --out FOLDER" "$work/eval-dir" "not the results of a normlab eval" \
  "$normlab" eval --checkpoint "$work/run" --data "$shards" --batches 1 --out "$work/eval-dir"
echo "analyze: kept the user's files; eval --out replaced its own results, refused a file of the user's and a folder"

# ---- sweep ------------------------------------------------------------------------------------
sargs=(--config "$src/configs/tiny/lm.yaml" --set "data.train=$shards" --set "data.tokenizer=$tok"
       --set model.vocab_size=320 --set eval.every=0 --set logging.every=1000 --set train.steps=1
       --set checkpoint.every=0 --lr 1e-3 --no-plots)
plant "$work/sweep"
ok "sweep" "$normlab" sweep "${sargs[@]}" --out "$work/sweep"
kept "$work/sweep" "sweep"
[ -s "$work/sweep/summary.md" ] || fail "sweep wrote no summary.md"
ok "sweep --report" "$normlab" sweep --report --no-plots --out "$work/sweep"
kept "$work/sweep" "sweep --report"
f=$(a_file sweep-file)
refused "sweep --out FILE" "$f" "$notdir" "$normlab" sweep "${sargs[@]}" --out "$f"
refused "sweep --report --out FILE" "$f" "$notdir" "$normlab" sweep --report --no-plots --out "$f"
echo "sweep: kept the user's files; a file as --out refused"

echo PASS
