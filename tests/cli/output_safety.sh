#!/usr/bin/env bash
# What a user already has survives every command that writes (docs/reliability.md, "What a
# user already has is never destroyed", the output contract): for each command with an output,
# a file of the user's (and, for the exports, a .git folder and a README.md, as in a git clone
# of a model repository) placed in its output folder beforehand is still there, unchanged,
# afterwards, or the command refuses with a clear message and changes nothing; --out naming an
# existing regular file is an error that names it and leaves the file as it was; `tokenizer
# train` states the smallest vocabulary its text allows, and that size trains. Then, command by
# command (the last part): a file of a name it writes that is the user's is refused by name and
# left byte for byte, an own earlier output is kept as NAME.prev, --overwrite replaces, a
# checkpoint folder (and a token-shard folder, an input, a folder inside an input) as --out is
# refused and left byte for byte, --out '' is refused naming the flag and writes nothing; and
# train's run folder rules. Self-contained (a small generated text, a model trained for 2
# steps): no corpus fixture; about a minute.
# Usage: output_safety.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR (CORPUS_DIR unused)
# NORMLAB_OUTPUT_SAFETY_ALL=1: go on after a failure and count them (to see which cases an older
# normlab fails); the test still fails.
set -euo pipefail
normlab=$(realpath "$1") src=$2 py=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
failures=0
fail() {
  echo "FAIL: $*"
  [ -n "${NORMLAB_OUTPUT_SAFETY_ALL:-}" ] || exit 1
  failures=$((failures + 1))
}

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
  [ "$rc" = 1 ] || return 0
  grep -qF -- "$path" "$work/refused.out" || { cat "$work/refused.out"; fail "$what: the error does not name $path"; }
  grep -qE -- "$pattern" "$work/refused.out" || { cat "$work/refused.out"; fail "$what: the error does not say '$pattern'"; }
  [ "$(state "$path")" = "$before" ] || fail "$what: $path changed although the command refused"
  [ "$(wc -l < "$work/refused.out")" -eq 1 ] || { cat "$work/refused.out"; fail "$what: more than one line of error"; }
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
  mine=config.json; [ "$format" != olmo ] || mine=normlab_config.yaml
  echo '{"stale": true}' > "$out/$mine"  # of a name the export writes, the user's: refused
  [ "$format" != olmo ] || echo "an earlier model.pt" > "$out/model.pt"  # not written without --pt
  refused "export --format $format over the user's $mine" "$out" "$mine: exists and is not the unchanged output" \
    "$normlab" export --format "$format" --checkpoint "$work/run" --out "$out"
  ok "export --format $format --overwrite" "$normlab" export --format "$format" --checkpoint "$work/run" --out "$out" --overwrite
  kept "$out" "export --format $format"
  if [ "$format" = olmo ]; then
    [ "$(cat "$out/model.pt")" = "an earlier model.pt" ] || fail "export --format olmo changed model.pt without --pt"
    grep -q "model.pt is from before" "$work/ok.out" || { cat "$work/ok.out"; fail "export --format olmo did not say model.pt is from before"; }
  fi
  [ -s "$out/model.safetensors" ] || fail "export --format $format wrote no model.safetensors"
  ! grep -q stale "$out/$mine" || fail "export --format $format --overwrite did not replace $mine"
  [ ! -e "$out/$mine.prev" ] || fail "export --format $format --overwrite kept $mine.prev"
  ! compgen -G "$out/.normlab.tmp-*" > /dev/null || fail "export --format $format left its staging folder"
  f=$(a_file export-file-$format)
  refused "export --format $format --out FILE" "$f" "$notdir" \
    "$normlab" export --format "$format" --checkpoint "$work/run" --out "$f"
  # Exported again over itself (and the user's files): the same files, the earlier ones kept as
  # NAME.prev, the user's kept.
  md5=$(md5sum < "$out/model.safetensors")
  ok "export --format $format again" "$normlab" export --format "$format" --checkpoint "$work/run" --out "$out"
  kept "$out" "export --format $format again"
  [ "$(md5sum < "$out/model.safetensors.prev" 2>/dev/null)" = "$md5" ] || fail "export --format $format again: the earlier model.safetensors is not kept as model.safetensors.prev"
  grep -q "model.safetensors: the output of an earlier .normlab export., kept as model.safetensors.prev" "$work/ok.out" \
    || { cat "$work/ok.out"; fail "export --format $format again did not say it kept model.safetensors.prev"; }
done
grep -q '"format": "normlab"' "$work/export-normlab/config.json" || fail "the normlab export's config.json is not the export's"
grep -q '"model_type": "normlab"' "$work/export-hf/config.json" || fail "the hf export's config.json is not the export's"
echo "export: normlab, hf and olmo kept notes.txt, README.md and .git, refused the user's config.json, replaced it with --overwrite, kept their own earlier files as .prev; a file as --out refused"

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
# eval --out names a file: a new one, or an earlier eval's results, which it keeps as
# FILE.prev; another file of the user's, or a folder, is refused.
mkdir -p "$work/evals"
ok "eval --out" "$normlab" eval --checkpoint "$work/run" --data "$shards" --batches 1 --out "$work/evals/result.json"
md5=$(md5sum < "$work/evals/result.json")
ok "eval --out over its own results" "$normlab" eval --checkpoint "$work/run" --data "$shards" --batches 1 --out "$work/evals/result.json"
grep -q '"perplexity"' "$work/evals/result.json" || fail "eval --out wrote no results"
[ "$(md5sum < "$work/evals/result.json.prev" 2>/dev/null)" = "$md5" ] || fail "eval --out over its own results: the earlier ones are not kept as result.json.prev"
f=$(a_file eval-file)
refused "eval --out FILE of the user's" "$f" "eval-file: exists and is not the unchanged output of an earlier .normlab eval.*--overwrite" \
  "$normlab" eval --checkpoint "$work/run" --data "$shards" --batches 1 --out "$f"
plant "$work/eval-dir"
refused "eval --out FOLDER" "$work/eval-dir" "exists and is a folder" \
  "$normlab" eval --checkpoint "$work/run" --data "$shards" --batches 1 --out "$work/eval-dir"
echo "analyze: kept the user's files; eval --out kept its own earlier results as .prev, refused a file of the user's and a folder"

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

# ---- the output contract, command by command -------------------------------------------------
# Each command that writes, given (1) a folder holding a file of the user's of a name it writes,
# (2) a checkpoint folder, (3) --out '' (and, where it has inputs, an input or a folder inside
# one): it refuses with one line naming the file or the flag and value, and every byte stays.
# (A foreign file of another name, and an existing file as --out, are the cases above.)

# refused_empty WHAT CMD...: CMD (whose --out, or other output flag, is '') fails (exit 1) with
# one line naming the flag and '', and writes nothing in its working folder.
refused_empty() {
  local what=$1 rc=0 before
  shift
  mkdir -p "$work/cwd"
  before=$(state "$work/cwd")
  (cd "$work/cwd" && "$@") > "$work/refused.out" 2>&1 || rc=$?
  [ "$rc" = 1 ] || { cat "$work/refused.out"; fail "$what: exit $rc, expected 1 (refused)"; }
  grep -qE -- "--[a-z-]+ '': names no path" "$work/refused.out" || { cat "$work/refused.out"; fail "$what: the error does not name the flag and ''"; }
  [ "$(wc -l < "$work/refused.out")" -eq 1 ] || { cat "$work/refused.out"; fail "$what: more than one line of error"; }
  [ "$(state "$work/cwd")" = "$before" ] || fail "$what: wrote into its working folder"
}
# mine DIR NAME...: DIR holds a file of the user's of each NAME.
mine() { local d=$1; shift; mkdir -p "$d"; for n in "$@"; do mkdir -p "$(dirname "$d/$n")"; echo "mine: $n" > "$d/$n"; done; }
ckpt_state=$(state "$ckpt")
# The commands with their inputs; OUT is replaced by the output path.
tok_cmd=("$normlab" tokenizer train --input "$work/text.txt" --vocab-size 300 --out OUT)
prep_cmd=("$normlab" data prepare --tokenizer "$tok" --input "$work/text.txt" --out OUT)
train_cmd=("$normlab" train "${args[@]}" --out OUT)
imp_cmd=("$normlab" import --from olmo --checkpoint "$work/export-olmo" --config "$work/export-olmo/normlab_config.yaml" --out OUT)
cons_cmd=("$normlab" checkpoint consolidate --checkpoint "$ckpt" --out OUT)
an_cmd=("$normlab" analyze --checkpoint "$work/run" --data "$shards" --batch 2 --no-plots --out OUT)
eval_cmd=("$normlab" eval --checkpoint "$work/run" --data "$shards" --batches 1 --out OUT)
sweep_cmd=("$normlab" sweep "${sargs[@]}" --out OUT)
gen_cmd=("$normlab" generate --checkpoint "$work/run" --prompt "the" --max-tokens 2 --temperature 0 --logits-out OUT)
# with CMD_ARRAY_NAME OUT: the command with OUT in place.
with() { local -n c=$1; local a out=(); for a in "${c[@]}"; do out+=("${a/#OUT/$2}"); done; printf '%s\0' "${out[@]}"; }
run_with() { local name=$1 o=$2; shift 2; local -a cmd; mapfile -d '' cmd < <(with "$name" "$o"); "$@" "${cmd[@]}"; }
c=$work/contract
for spec in "tokenizer train:tok_cmd:tokenizer.model" "data prepare:prep_cmd:index.json" \
            "train:train_cmd:metrics.jsonl" "export:exp_normlab:model.safetensors" \
            "export --format hf:exp_hf:modeling_normlab.py" "export --format olmo:exp_olmo:normlab_config.yaml" \
            "import:imp_cmd:config.yaml" "checkpoint consolidate:cons_cmd:config.yaml" \
            "analyze:an_cmd:diagnostics.jsonl" "sweep:sweep_cmd:summary.md"; do
  IFS=: read -r what cmd name <<< "$spec"
  exp_normlab=("$normlab" export --format normlab --checkpoint "$work/run" --out OUT)
  exp_hf=("$normlab" export --format hf --checkpoint "$work/run" --out OUT)
  exp_olmo=("$normlab" export --format olmo --checkpoint "$work/run" --out OUT)
  d=$c/same-${cmd}
  mine "$d" "$name"
  pattern="$name: exists and is not the unchanged output|holds $name|exists and is not empty"
  run_with "$cmd" "$d" refused "$what over the user's $name" "$d" "$pattern"
  run_with "$cmd" "$ckpt" refused "$what --out CHECKPOINT" "$ckpt" "is a checkpoint folder|is the input"
  [ "$(state "$ckpt")" = "$ckpt_state" ] || fail "$what changed the checkpoint folder"
  run_with "$cmd" "" refused_empty "$what --out ''"
done
# A token-shard folder is another run's input: refused by the commands that write folders.
for cmd in tok_cmd exp_normlab an_cmd sweep_cmd; do
  run_with "$cmd" "$shards" refused "$cmd --out SHARDS" "$shards" "is a token-shard folder"
done
# A run's checkpoints/ folder is the run's: refused too.
refused "export --out RUN/checkpoints" "$work/run/checkpoints" "is a run's checkpoints folder" "${exp_normlab[@]/#OUT/$work/run/checkpoints}"
# eval --out and generate --logits-out name files: a file of the user's, one inside a
# checkpoint folder, and ''.
for cmd in eval_cmd gen_cmd; do
  f=$(a_file "$cmd-mine.json")
  run_with "$cmd" "$f" refused "$cmd over the user's file" "$f" "$cmd-mine.json: exists and is not the unchanged output"
  run_with "$cmd" "$ckpt/out.json" refused "$cmd into a checkpoint folder" "$ckpt" "lies inside a checkpoint folder"
  run_with "$cmd" "" refused_empty "$cmd ''"
done
# An input as --out, and --out inside an input that is not a run folder.
refused "analyze --out RUN (its --checkpoint)" "$work/run" "is the input \(--checkpoint" "${an_cmd[@]/#OUT/$work/run}"
refused "data prepare --out its --input" "$work/text.txt" "is the input \(--input" "${prep_cmd[@]/#OUT/$work/text.txt}"
refused "checkpoint consolidate --out inside its checkpoint" "$ckpt" "lies inside" "${cons_cmd[@]/#OUT/$ckpt/whole}"
refused "eval --out its --tasks file" "$work/text.txt" "is the input \(--tasks" \
  "$normlab" eval --checkpoint "$work/run" --tasks "$work/text.txt" --out "$work/text.txt"
# An own earlier output whose file was changed since is no longer provably its own.
d=$c/analysis
run_with an_cmd "$d" ok "analyze"
echo "edited" >> "$d/diagnostics.jsonl"
run_with an_cmd "$d" refused "analyze over its own output edited since" "$d" "diagnostics.jsonl: exists and is not the unchanged output"
echo "contract: every writing command refused a file of the user's of its names, a checkpoint folder, a shard folder, an input and --out ''"

# tokenizer train: an own earlier tokenizer is kept as .prev; the tokenizer that shards were
# prepared with is never replaced, not even with --overwrite.
d=$c/tok
run_with tok_cmd "$d" ok "tokenizer train"
md5=$(md5sum < "$d/tokenizer.model")
run_with tok_cmd "$d" ok "tokenizer train again"
[ "$(md5sum < "$d/tokenizer.model.prev" 2>/dev/null)" = "$md5" ] || fail "tokenizer train again: the earlier tokenizer.model is not kept as tokenizer.model.prev"
"$normlab" data prepare --tokenizer "$d/tokenizer.model" --input "$work/text.txt" --out "$d/shards" > /dev/null 2>&1 || fail "data prepare with $d/tokenizer.model"
refused "tokenizer train over the tokenizer of shards" "$d" "shards of .* were prepared with" \
  "$normlab" tokenizer train --input "$work/text.txt" --vocab-size 300 --out "$d" --overwrite
echo "tokenizer train: kept its own earlier tokenizer as .prev; refused the one shards were prepared with"

# sweep: the user's summary.md stops it; its own earlier reports are kept as .prev.
d=$c/sweep
run_with sweep_cmd "$d" ok "sweep"
md5=$(md5sum < "$d/summary.md")
ok "sweep --report" "$normlab" sweep --report --no-plots --out "$d"
[ "$(md5sum < "$d/summary.md.prev" 2>/dev/null)" = "$md5" ] || fail "sweep --report: the earlier summary.md is not kept as summary.md.prev"
echo "sweep: kept its own earlier reports as .prev"

# train: the run folder's files. Fresh over files of its names: refused naming them (TensorBoard
# off too); a hand-written config given as --config X/config.yaml --out X: refused, kept; a run
# folder whose checkpoints/ was removed: refused, and with --resume its files are kept as .prev;
# --overwrite replaces; --resume from a checkpoint keeps a config.yaml edited by hand.
d=$c/run-mine
mine "$d" config.yaml train.log metrics.jsonl summary.json tensorboard/events.out.tfevents.1.host
refused "train over a run folder's files of the user's" "$d" "holds config.yaml, train.log, metrics.jsonl, summary.json, tensorboard/events" "${train_cmd[@]/#OUT/$d}"
printf '# my experiment\nbase: %s\ntrain:\n  steps: 2\n' "$src/configs/tiny/lm.yaml" > "$c/hand.yaml"
mkdir -p "$c/hand" && cp "$c/hand.yaml" "$c/hand/config.yaml"
refused "train --config X/config.yaml --out X" "$c/hand" "holds config.yaml " \
  "$normlab" train --config "$c/hand/config.yaml" --set "data.train=$shards" --set "data.tokenizer=$tok" \
  --set model.vocab_size=320 --set eval.every=0 --out "$c/hand"
d=$c/run-again
"${train_cmd[@]/#OUT/$d}" --set logging.tensorboard=true > "$work/ok.out" 2>&1 || { cat "$work/ok.out"; fail "train with TensorBoard"; }
rm -rf "$d/checkpoints"
before=$(state "$d")
refused "train over a run whose checkpoints were removed" "$d" "holds config.yaml, train.log, metrics.jsonl" "${train_cmd[@]/#OUT/$d}"
md5=$(md5sum < "$d/metrics.jsonl")
ok "train --resume in a run without checkpoints" "${train_cmd[@]/#OUT/$d}" --resume
[ "$(md5sum < "$d/metrics.jsonl.prev" 2>/dev/null)" = "$md5" ] || fail "train --resume without a checkpoint: the earlier metrics.jsonl is not kept as metrics.jsonl.prev"
compgen -G "$d/tensorboard.prev/events.out.tfevents.*" > /dev/null || fail "train --resume without a checkpoint: the earlier TensorBoard events are not kept in tensorboard.prev"
[ "$(grep -c '"step"' "$d/metrics.jsonl")" = 2 ] || fail "train --resume without a checkpoint: metrics.jsonl is not the new run's 2 steps"
d=$c/run-over
mine "$d" metrics.jsonl train.log
ok "train --overwrite" "${train_cmd[@]/#OUT/$d}" --overwrite
! grep -q "mine" "$d/metrics.jsonl" "$d/train.log" || fail "train --overwrite did not replace metrics.jsonl and train.log"
[ ! -e "$d/metrics.jsonl.prev" ] || fail "train --overwrite kept metrics.jsonl.prev"
echo "# edited by hand" >> "$d/config.yaml"
md5=$(md5sum < "$d/config.yaml")
ok "train --resume with a config.yaml edited by hand" "${train_cmd[@]/#OUT/$d}" --resume --set train.steps=3
[ "$(md5sum < "$d/config.yaml.prev" 2>/dev/null)" = "$md5" ] || fail "train --resume: the hand-edited config.yaml is not kept as config.yaml.prev"
echo "train: refused a fresh start over the user's run files and a hand-written config; kept a checkpoint-less run's files as .prev with --resume; --overwrite replaced; a hand-edited config.yaml kept on resume"

# ---- an own earlier output edited in place, its size kept -------------------------------------
# One digit changed in a file that a command wrote (a config, a vocabulary's score, a metrics
# line, a summary) makes it the user's: the ledger's name and size still match it, its digest
# does not. Every writing command run again without --overwrite refuses it, naming it, and the
# user's bytes stay (train, whose run folder has its own rules: a fresh start is refused, and
# --resume keeps the edited config.yaml as config.yaml.prev byte for byte).
# edit_digit FILE: the first digit of FILE changed, in place, the size kept.
edit_digit() {
  "$py" - "$1" <<'PY'
import re, sys
path = sys.argv[1]
with open(path, "r+b") as f:
    data = f.read()
    m = re.search(rb"[0-9]", data)
    assert m, path + ": no digit to edit"
    f.seek(m.start())
    f.write(b"1" if data[m.start()] != ord("1") else b"2")
PY
}
# edited WHAT DIR NAME CMD...: DIR/NAME, written by CMD, edited in place; CMD again is refused,
# naming NAME, and nothing in DIR changes.
edited() {
  local what=$1 dir=$2 name=$3 size
  shift 3
  size=$(stat -c %s "$dir/$name")
  edit_digit "$dir/$name"
  [ "$(stat -c %s "$dir/$name")" = "$size" ] || fail "$what: the edit changed the size of $name"
  refused "$what over its own $name edited since (same size)" "$dir" \
    "$name: exists and is not the unchanged output|holds $name|exists and is not empty|holds checkpoints" "$@"
  [ ! -e "$dir/$name.prev" ] || fail "$what: set the user's edited $name aside as $name.prev"
}
e=$c/edited
run_with tok_cmd "$e/tok" ok "tokenizer train"
run_with tok_cmd "$e/tok" edited "tokenizer train" "$e/tok" tokenizer.vocab
run_with prep_cmd "$e/shards" ok "data prepare"
edited "data prepare" "$e/shards" index.json "${prep_cmd[@]/#OUT/$e/shards}"
for format in normlab hf olmo; do
  name=config.json; [ "$format" != olmo ] || name=normlab_config.yaml
  cmd=exp_$format
  run_with "$cmd" "$e/export-$format" ok "export --format $format"
  run_with "$cmd" "$e/export-$format" edited "export --format $format" "$e/export-$format" "$name"
done
# import and checkpoint consolidate write into a folder without checkpoints: a run folder whose
# checkpoints were removed, its config.yaml theirs and then edited
for cmd in imp_cmd cons_cmd; do
  run_with "$cmd" "$e/$cmd" ok "$cmd"
  rm -rf "$e/$cmd/checkpoints"
  run_with "$cmd" "$e/$cmd" edited "$cmd" "$e/$cmd" config.yaml
done
run_with an_cmd "$e/analysis" ok "analyze"
run_with an_cmd "$e/analysis" edited "analyze" "$e/analysis" diagnostics.jsonl
mkdir -p "$e/evals"
run_with eval_cmd "$e/evals/result.json" ok "eval --out"
run_with eval_cmd "$e/evals/result.json" edited "eval --out" "$e/evals" result.json
run_with gen_cmd "$e/evals/logits.json" ok "generate --logits-out"
run_with gen_cmd "$e/evals/logits.json" edited "generate --logits-out" "$e/evals" logits.json
run_with sweep_cmd "$e/sweep" ok "sweep"
edited "sweep --report" "$e/sweep" summary.md "$normlab" sweep --report --no-plots --out "$e/sweep"
run_with train_cmd "$e/run" ok "train"
run_with train_cmd "$e/run" edited "train" "$e/run" config.yaml
md5=$(md5sum < "$e/run/config.yaml")
ok "train --resume with its config.yaml edited in place" "${train_cmd[@]/#OUT/$e/run}" --resume --set train.steps=3
[ "$(md5sum < "$e/run/config.yaml.prev" 2>/dev/null)" = "$md5" ] || fail "train --resume: the config.yaml edited in place is not kept as config.yaml.prev"
echo "edited in place, the size kept: tokenizer.vocab, index.json, each export's config, import's and consolidate's config.yaml, diagnostics.jsonl, eval's and generate's --out, summary.md and train's config.yaml refused as the user's, byte for byte"

[ "$failures" = 0 ] || { echo "FAIL: $failures failures"; exit 1; }
echo PASS
