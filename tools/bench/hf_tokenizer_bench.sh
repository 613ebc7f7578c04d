#!/usr/bin/env bash
# `normlab data prepare` with a Hugging Face tokenizer.json against the `tokenizers` library
# (tools/bench/prepare_peer_hf.py, encode_batch_fast on RAYON_NUM_THREADS threads) on the same text,
# threads and tokenizer, in one invocation: for a GPT-NeoX-style and a Llama-3-style byte-level
# BPE of 32,000 ids trained by `tokenizers` on the built-in corpus, the corpus repeated COPIES
# times (default 8, ~33 MB), best of REPEATS runs each (default 3). Checks that both sides wrote
# the same tokens, then prints MB/s and the throughput ratio.
# Usage: tools/bench/hf_tokenizer_bench.sh [COPIES] [REPEATS] [THREADS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${NORMLAB_BUILD_DIR:-$root/build}
copies=${1:-8} repeats=${2:-3} threads=${3:-2}
py=${NORMLAB_VENV:-$root/.venv}/bin/python
"$py" -c "import tokenizers, numpy" 2>/dev/null \
  || { echo "hf_tokenizer_bench: $py lacks tokenizers or numpy (tools/setup.sh --tests)" >&2; exit 1; }
"$root/tools/prepare_corpus.sh" >/dev/null
kjv=$root/data/kjv
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for ((i = 0; i < copies; i++)); do cat "$kjv/corpus.txt"; echo; done > "$work/corpus.txt"
bytes=$(stat -c %s "$work/corpus.txt")
version=$("$py" -c "import tokenizers; print(tokenizers.__version__)")

for style in neox llama3; do
  eos='<|endoftext|>'
  [ "$style" = llama3 ] && eos='<|end_of_text|>'
  "$py" "$root/tools/bench/prepare_peer_hf.py" train "$style" "$kjv/corpus.txt" "$work/$style"
  tok=$work/$style/tokenizer.json
  best_ours=999999 best_peer=999999
  for ((r = 0; r < repeats; r++)); do
    s=$(date +%s.%N)
    "$build/tools/normlab" data prepare --tokenizer "$tok" --input "$work/corpus.txt" \
      --out "$work/ours" --val-fraction 0 --threads "$threads" --overwrite >/dev/null 2>&1
    e=$(date +%s.%N)
    ours=$(awk -v s="$s" -v e="$e" 'BEGIN { print e - s }')
    peer=$(RAYON_NUM_THREADS=$threads TOKENIZERS_PARALLELISM=true "$py" "$root/tools/bench/prepare_peer_hf.py" \
      encode "$tok" "$eos" "$work/corpus.txt" "$work/peer.bin" | awk '{print $2}')
    best_ours=$(awk -v a="$ours" -v b="$best_ours" 'BEGIN { print (a < b ? a : b) }')
    best_peer=$(awk -v a="$peer" -v b="$best_peer" 'BEGIN { print (a < b ? a : b) }')
  done
  if ! cmp -s <(tail -c +65 "$work/ours/train-00000.bin") "$work/peer.bin"; then
    echo "hf_tokenizer_bench: normlab and tokenizers produced different tokens ($style)" >&2
    exit 1
  fi
  awk -v b="$bytes" -v o="$best_ours" -v p="$best_peer" -v r="$repeats" -v t="$threads" \
      -v s="$style" -v v="$version" 'BEGIN {
    printf "%s tokenizer.json, %.1f MB, %d threads (best of %d; both read, encode, add EOS, write uint16):\n", s, b / 1e6, t, r
    printf "  normlab data prepare        %6.2f s  %6.1f MB/s\n", o, b / o / 1e6
    printf "  python tokenizers %-9s %6.2f s  %6.1f MB/s\n", v, p, b / p / 1e6
    printf "  ratio (normlab / peer throughput)  %.2fx\n", p / o }'
done
