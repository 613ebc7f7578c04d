#!/usr/bin/env bash
# Sourced by training_trains.sh and training_trains_moe.sh, which set normlab, src, kjv, python
# and work (their arguments NORMLAB, SOURCE_DIR, CORPUS_DIR, PYTHON and WORK_DIR).
#   every_scheme                      prints the schemes of `normlab schemes`, one a line; fails
#                                     when it prints none or a scheme has no 1.3B config
#                                     (configs/1.3b/<scheme>.yaml)
#   train_40_steps CONFIG PRECISION SCHEME...
#                                     trains each SCHEME 40 steps of CONFIG on the built-in corpus
#                                     in PRECISION, with the validation loss (8 batches) at steps 0
#                                     and 40, no checkpoint, into $work/<scheme> (its output in
#                                     $work/<scheme>.out); on a failure prints that output and
#                                     exits 1

every_scheme() {
  local s found=0
  for s in $("$normlab" schemes --json | "$python" -c 'import json, sys; print(*(s["name"] for s in json.load(sys.stdin)))'); do
    [ -f "$src/configs/1.3b/$s.yaml" ] || { echo "FAIL: scheme $s has no configs/1.3b/$s.yaml" >&2; return 1; }
    echo "$s"
    found=$((found + 1))
  done
  [ $found -gt 0 ] || { echo "FAIL: normlab schemes listed no scheme" >&2; return 1; }
}

train_40_steps() {
  local config=$1 precision=$2 s
  shift 2
  for s in "$@"; do
    "$normlab" train --config "$config" --set model.scheme=$s \
      --set "data.train=$kjv/shards" --set "data.tokenizer=$kjv/tokenizer.model" \
      --set train.steps=40 --set train.precision="$precision" --set eval.at_start=true --set eval.every=40 \
      --set eval.batches=8 --set checkpoint.every=0 --set checkpoint.at_end=false \
      --set logging.every=1000 --out "$work/$s" > "$work/$s.out" 2>&1 \
      || { cat "$work/$s.out"; echo "FAIL: training $s"; exit 1; }
  done
}
