#!/usr/bin/env bash
# Sourced by training_trains.sh and training_trains_moe.sh, which set normlab, src, kjv and work
# (their arguments NORMLAB, SOURCE_DIR, CORPUS_DIR and WORK_DIR).
#   every_scheme                      prints the schemes, one a line: every scheme has its 1.3B
#                                     config, configs/1.3b/<scheme>.yaml (other files there, such
#                                     as hyper_dhc2.yaml, are variants: their scheme is not their
#                                     name); fails when it finds none
#   train_40_steps CONFIG PRECISION SCHEME...
#                                     trains each SCHEME 40 steps of CONFIG on the built-in corpus
#                                     in PRECISION, with the validation loss (8 batches) at steps 0
#                                     and 40, no checkpoint, into $work/<scheme> (its output in
#                                     $work/<scheme>.out); on a failure prints that output and
#                                     exits 1

every_scheme() {
  local f s found=0
  for f in "$src"/configs/1.3b/*.yaml; do
    s=$(basename "$f" .yaml)
    if [ "$("$normlab" config --config "$f" | grep -c "^  scheme: $s\$")" -gt 0 ]; then
      echo "$s"
      found=$((found + 1))
    fi
  done
  [ $found -gt 0 ] || { echo "FAIL: no scheme config found in $src/configs/1.3b" >&2; return 1; }
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
