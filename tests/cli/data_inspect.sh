#!/usr/bin/env bash
# `normlab data inspect` on every format (docs/data.md): a shard folder, a nanoGPT-style uint16
# array and a Megatron dataset holding the same documents (written by Python: sentencepiece ids,
# numpy, the .idx layout from struct) report the same token and document counts, their dtype,
# and the same first sample, decoded with --tokenizer as Python sentencepiece decodes those ids.
# Self-contained (no corpus fixture); a few seconds. Fails without numpy or sentencepiece in
# PYTHON (tools/setup.sh installs both into the venv).
# Usage: data_inspect.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR (CORPUS_DIR unused)
set -euo pipefail
normlab=$1 python=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
"$python" -c "import sentencepiece, numpy" 2>/dev/null \
  || fail "$python has no sentencepiece or numpy (run tools/setup.sh, which installs them into the venv)"

awk 'BEGIN { srand(3); split("the of and to in a is that for it as was with be by on not he this are or his from at which", w);
             for (l = 0; l < 400; l++) { s = ""; for (i = 0; i < 10; i++) s = s (i ? " " : "") w[int(rand() * 24) + 1]; print s;
                                         if (l % 4 == 3) print "" } }' > "$work/text.txt"
"$normlab" tokenizer train --input "$work/text.txt" --vocab-size 300 --out "$work/tok" > "$work/tok.out" 2>&1 \
  || { cat "$work/tok.out"; fail "tokenizer train"; }
tok=$work/tok/tokenizer.model
"$normlab" data prepare --tokenizer "$tok" --input "$work/text.txt" --val-fraction 0 --out "$work/shards" \
  > "$work/prepare.out" 2>&1 || { cat "$work/prepare.out"; fail "data prepare"; }

# The same documents as a uint16 array and a Megatron int32 dataset, one sequence per document.
"$python" - "$work" <<'PY' > "$work/expected.txt"
import struct, sys
import numpy as np, sentencepiece as spm
work = sys.argv[1]
sp = spm.SentencePieceProcessor(model_file=f"{work}/tok/tokenizer.model")
docs = [d for d in open(f"{work}/text.txt").read().split("\n\n") if d.strip()]
seqs = [sp.encode(d.strip("\n")) + [sp.eos_id()] for d in docs]
ids = [t for s in seqs for t in s]
np.array(ids, dtype=np.uint16).tofile(f"{work}/train.bin")
with open(f"{work}/mega.bin", "wb") as f:
    f.write(np.array(ids, dtype=np.int32).tobytes())
lengths = [len(s) for s in seqs]
pointers = np.cumsum([0] + [4 * n for n in lengths])[:-1].tolist()
with open(f"{work}/mega.idx", "wb") as f:
    f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 4, len(seqs), len(seqs) + 1))
    f.write(struct.pack(f"<{len(seqs)}i", *lengths) + struct.pack(f"<{len(seqs)}q", *pointers))
    f.write(struct.pack(f"<{len(seqs) + 1}q", *range(len(seqs) + 1)))
print(len(ids), len(seqs), sp.eos_id())
print(sp.decode(ids[:33]))
PY
read -r tokens docs eos < <(head -1 "$work/expected.txt")
first=$(sed -n 2p "$work/expected.txt")

"$normlab" data inspect "$work/shards" --seq-len 64 > "$work/i_shards.out" 2>&1 || { cat "$work/i_shards.out"; fail "inspect shards"; }
"$normlab" data inspect "$work/train.bin" --format tokens --dtype uint16 --eos "$eos" --seq-len 64 --tokenizer "$tok" \
  > "$work/i_tokens.out" 2>&1 || { cat "$work/i_tokens.out"; fail "inspect tokens"; }
"$normlab" data inspect "$work/mega" --format megatron --seq-len 64 --tokenizer "$tok" \
  > "$work/i_mega.out" 2>&1 || { cat "$work/i_mega.out"; fail "inspect megatron"; }
grep -q "train: $docs documents, $tokens tokens" "$work/i_shards.out" || { cat "$work/i_shards.out"; fail "shard counts"; }
grep -q "train.bin: tokens, uint16 ids, 1 file" "$work/i_tokens.out" || { cat "$work/i_tokens.out"; fail "tokens dtype"; }
grep -q "^  $tokens tokens, $docs documents" "$work/i_tokens.out" || { cat "$work/i_tokens.out"; fail "tokens counts"; }
grep -q "mega: megatron, int32 ids, 1 file" "$work/i_mega.out" || { cat "$work/i_mega.out"; fail "megatron dtype"; }
grep -q "^  $tokens tokens, $docs documents" "$work/i_mega.out" || { cat "$work/i_mega.out"; fail "megatron counts"; }
for f in i_shards i_tokens i_mega; do
  got=$(grep -A1 "first sample: " "$work/$f.out" | sed '1s/^  first sample: //')
  [ "$got" = "$first" ] || { cat "$work/$f.out"; echo "want: $first"; fail "$f: first sample"; }
done
echo "inspect: shards, uint16 array and Megatron dataset agree ($tokens tokens, $docs documents) and decode the first sample as sentencepiece"
echo "PASS"
