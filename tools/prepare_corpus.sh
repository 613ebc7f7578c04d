#!/usr/bin/env bash
# The built-in default corpus: the King James Bible from Debian's bible-kjv package (public
# domain, 4.2 MB, 1,189 chapters), turned into a tokenizer and token shards:
#   data/kjv/corpus.txt        one document per chapter ("Genesis 1" then one verse per line),
#                              documents separated by blank lines
#   data/kjv/tokenizer.model   SentencePiece BPE, 4096 pieces, byte fallback
#   data/kjv/shards/           train and val (2 % of the chapters) token shards + index.json
#   data/kjv/tasks/            multiple-choice tasks: kjv_next_verse.jsonl, arithmetic.jsonl
# Usage: tools/prepare_corpus.sh [--force]     (skips work whose outputs exist unless --force)
# Env:   NORMLAB_BUILD_DIR (default: <repo>/build), NORMLAB_DATA_DIR (default: <repo>/data/kjv)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${NORMLAB_BUILD_DIR:-$root/build}
out=${NORMLAB_DATA_DIR:-$root/data/kjv}
normlab=$build/tools/normlab
force=0
[ "${1:-}" = "--force" ] && force=1
command -v bible >/dev/null || { echo "prepare_corpus: the 'bible' program is missing (run tools/setup.sh)" >&2; exit 1; }
[ -x "$normlab" ] || { echo "prepare_corpus: $normlab is missing (run tools/build.sh)" >&2; exit 1; }
mkdir -p "$out"

if ((force)) || [ ! -s "$out/corpus.txt" ]; then
  # bible prints "Book N" headings, blank lines and indented, numbered verses; keep the headings,
  # drop the verse numbers, start each chapter after a blank line.
  bible -l100000 "Gen1:1-Rev22:21" | awk '
    /^$/ { next }
    /^  [0-9]+ / { sub(/^  [0-9]+ /, ""); print; next }
    { if (n++) print ""; print }' > "$out/corpus.txt.tmp"
  mv "$out/corpus.txt.tmp" "$out/corpus.txt"
fi
if ((force)) || [ ! -s "$out/tokenizer.model" ]; then
  # A tokenizer that shards were prepared with is never replaced: --force rebuilds both, so the
  # shards (this script's own, rebuilt below) go first; --overwrite replaces its earlier files.
  again=()
  if ((force)); then rm -rf "$out/shards"; again=(--overwrite); fi
  "$normlab" tokenizer train --input "$out/corpus.txt" --vocab-size 4096 --model-type bpe --out "$out" \
    "${again[@]}"
fi
if ((force)) || [ ! -s "$out/shards/index.json" ]; then
  "$normlab" data prepare --tokenizer "$out/tokenizer.model" --input "$out/corpus.txt" --out "$out/shards" \
    --val-fraction 0.02 --threads 2 --overwrite
fi
if ((force)) || [ ! -s "$out/tasks/arithmetic.jsonl" ]; then
  python3 "$root/tools/make_tasks.py" "$out/corpus.txt" "$out/tasks"
fi
"$normlab" data inspect "$out/shards" --seq-len 256
