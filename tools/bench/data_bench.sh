#!/usr/bin/env bash
# Data pipeline benchmark, both sides in one invocation on the same machine:
#  1. `normlab data prepare` (2 threads) against Python sentencepiece (tools/bench/prepare_peer.py,
#     batch encoding with 2 threads) on the same text and model: the built-in corpus repeated
#     COPIES times (default 8, ~33 MB), best of REPEATS runs each; prints the throughput ratio.
#  2. the loader's tokens/s against the tokens/s a CPU training step of configs/small consumes
#     (normlab-bench-loader); prints the ratio.
# Usage: tools/bench/data_bench.sh [COPIES] [REPEATS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${NORMLAB_BUILD_DIR:-$root/build}
copies=${1:-8} repeats=${2:-3}
py=${NORMLAB_VENV:-$root/.venv}/bin/python
"$root/tools/prepare_corpus.sh" >/dev/null
kjv=$root/data/kjv
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for ((i = 0; i < copies; i++)); do cat "$kjv/corpus.txt"; echo; done > "$work/corpus.txt"
bytes=$(stat -c %s "$work/corpus.txt")

best_ours=999999 best_peer=999999
for ((r = 0; r < repeats; r++)); do
  s=$(date +%s.%N)
  "$build/tools/normlab" data prepare --tokenizer "$kjv/tokenizer.model" --input "$work/corpus.txt" \
    --out "$work/ours" --val-fraction 0 --threads 2 --overwrite >/dev/null 2>&1
  e=$(date +%s.%N)
  ours=$(awk -v s="$s" -v e="$e" 'BEGIN { print e - s }')
  peer=$("$py" "$root/tools/bench/prepare_peer.py" "$kjv/tokenizer.model" "$work/corpus.txt" "$work/peer.bin" 2 | awk '{print $2}')
  best_ours=$(awk -v a="$ours" -v b="$best_ours" 'BEGIN { print (a < b ? a : b) }')
  best_peer=$(awk -v a="$peer" -v b="$best_peer" 'BEGIN { print (a < b ? a : b) }')
done
# Same tokens on both sides (the shard payload after its 64-byte header).
if ! cmp -s <(tail -c +65 "$work/ours/train-00000.bin") "$work/peer.bin"; then
  echo "data_bench: normlab and the peer produced different tokens" >&2
  exit 1
fi
awk -v b="$bytes" -v o="$best_ours" -v p="$best_peer" -v r="$repeats" 'BEGIN {
  printf "data prepare, %.1f MB, 2 threads (best of %d; both sides read, encode, add EOS, write uint16):\n", b / 1e6, r
  printf "  normlab data prepare   %6.2f s  %6.1f MB/s\n", o, b / o / 1e6
  printf "  python sentencepiece   %6.2f s  %6.1f MB/s\n", p, b / p / 1e6
  printf "  ratio (normlab / peer throughput)  %.2fx\n", p / o }'
echo
"$build/tools/bench/normlab-bench-loader" --config "$root/configs/small/lm.yaml" --data "$kjv/shards"
