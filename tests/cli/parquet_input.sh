#!/usr/bin/env bash
# Parquet input (docs/data.md): a file written by pyarrow in 4 row groups, with accents, emoji,
# CJK and blank lines in its texts, streamed by tools/parquet_to_jsonl.py into .jsonl.gz and
# prepared by `normlab data prepare`: the shards hold exactly what Python's sentencepiece gives
# for each row's text followed by EOS, in row order. `data prepare` on the .parquet itself
# refuses with one line pointing at the bridge; a missing column is one line naming the file.
# Self-contained (no corpus fixture); a few seconds. Fails without pyarrow, sentencepiece or
# numpy in PYTHON (tools/setup.sh installs them into the venv).
# Usage: parquet_input.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR (CORPUS_DIR unused)
set -euo pipefail
normlab=$1 src=$2 python=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
"$python" -c "import pyarrow, sentencepiece, numpy" 2>/dev/null \
  || fail "$python has no pyarrow, sentencepiece or numpy (run tools/setup.sh, which installs them into the venv)"

"$python" - "$work" <<'PY'
import random, sys
import pyarrow as pa, pyarrow.parquet as pq
work = sys.argv[1]
rng = random.Random(5)
words = "the of and to in a is that for it as was with be by on not he this are or his from at which".split()
extra = ["café", "naïve", "😀", "漢字", "déjà vu", "x = f(y) + 1;"]
texts = []
for i in range(120):
    lines = [" ".join(rng.choice(words + extra) for _ in range(rng.randint(3, 12))) for _ in range(rng.randint(1, 4))]
    texts.append("\n\n".join(lines) if i % 3 == 0 else "\n".join(lines))
pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), f"{work}/web.parquet", row_group_size=32)
with open(f"{work}/text.txt", "w") as f:
    f.write("\n\n".join(texts * 5))
PY
"$normlab" tokenizer train --input "$work/text.txt" --vocab-size 320 --out "$work/tok" > "$work/tok.out" 2>&1 \
  || { cat "$work/tok.out"; fail "tokenizer train"; }

rc=0
"$normlab" data prepare --tokenizer "$work/tok/tokenizer.model" --input "$work/web.parquet" --out "$work/direct" \
  > "$work/direct.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "web.parquet: Parquet is read through tools/parquet_to_jsonl.py" "$work/direct.out" \
  || { cat "$work/direct.out"; fail "data prepare on a .parquet did not refuse with the bridge's name"; }
[ ! -e "$work/direct" ] || fail "the refused prepare left $work/direct"

rc=0
"$python" "$src/tools/parquet_to_jsonl.py" --input "$work/web.parquet" --text-field body --out "$work/j" > "$work/nofield.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "web.parquet: no column 'body'" "$work/nofield.out" || { cat "$work/nofield.out"; fail "missing column"; }

"$python" "$src/tools/parquet_to_jsonl.py" --input "$work/*.parquet" --text-field text --out "$work/j" > "$work/bridge.out" 2>&1 \
  || { cat "$work/bridge.out"; fail "bridge"; }
grep -q "1 files, 4 row groups, 120 rows" "$work/bridge.out" || { cat "$work/bridge.out"; fail "row groups"; }
"$normlab" data prepare --tokenizer "$work/tok/tokenizer.model" --input "$work/j/*.jsonl.gz" --val-fraction 0 \
  --out "$work/shards" > "$work/prepare.out" 2>&1 || { cat "$work/prepare.out"; fail "data prepare"; }

"$python" - "$work" <<'PY'
import json, sys
import numpy as np, pyarrow.parquet as pq, sentencepiece as spm
work = sys.argv[1]
sp = spm.SentencePieceProcessor(model_file=f"{work}/tok/tokenizer.model")
want = []
for t in pq.read_table(f"{work}/web.parquet", columns=["text"]).column(0).to_pylist():
    want += sp.encode(t) + [sp.eos_id()]
idx = json.load(open(f"{work}/shards/index.json"))
got = []
for s in idx["splits"]["train"]["shards"]:
    got += np.fromfile(f"{work}/shards/{s['file']}", dtype=np.uint16, offset=64).tolist()
assert idx["splits"]["train"]["documents"] == 120, idx["splits"]["train"]["documents"]
assert got == want, (len(got), len(want))
print(f"120 Parquet rows in 4 row groups -> {len(got)} tokens, equal to Python sentencepiece on each row + EOS")
PY
echo "PASS"
