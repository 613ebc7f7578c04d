#!/usr/bin/env bash
# Evaluating and using a trained model as a user does, on the built-in corpus fixture (CTest
# label slow): multiple-choice tasks during training, `normlab eval` (perplexity per token and
# per byte, task accuracy) giving the same numbers from the run folder and its export,
# `normlab generate` (greedy: the same text with and without the KV cache; sampling:
# reproducible by seed), eval and analyze on the validation tokens as a flat array and as a
# Megatron dataset (the numbers of the shards), and bad input named.
# The export also runs in Python (tools/load_export.py, the independent reference model) and
# continues the prompt with the same greedy text.
# Usage: eval_generate.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR
set -euo pipefail
normlab=$1 src=$2 kjv=$3 python=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
tasks=$kjv/tasks/kjv_next_verse.jsonl,$kjv/tasks/arithmetic.jsonl

"$normlab" train --config "$src/configs/tiny/lm.yaml" --set "data.train=$kjv/shards" \
  --set "data.tokenizer=$kjv/tokenizer.model" --set train.steps=30 --set eval.every=15 --set "eval.tasks=$tasks" \
  --out "$work/run" > "$work/train.out" 2>&1 || { cat "$work/train.out"; fail "train with tasks"; }
[ "$(grep -c '"task_arithmetic_acc"' "$work/run/metrics.jsonl")" -eq 2 ] || fail "task accuracy not in metrics at steps 15 and 30"
grep -q '"val_bits_per_byte"' "$work/run/metrics.jsonl" || fail "no bits per byte in metrics"
grep -q '"kjv_next_verse"' "$work/run/summary.json" || fail "no task results in summary.json"

"$normlab" eval --checkpoint "$work/run" --data "$kjv/shards" --tasks "$kjv/tasks/kjv_next_verse.jsonl" \
  "$kjv/tasks/arithmetic.jsonl" --out "$work/eval1.json" > "$work/eval1.out" 2>&1 || { cat "$work/eval1.out"; fail "eval"; }
grep -Eq "^val: loss [0-9.]+, perplexity [0-9.]+ \([0-9]+ tokens\); per byte: perplexity [0-9.]+, [0-9.]+ bits" "$work/eval1.out" \
  || { cat "$work/eval1.out"; fail "eval output"; }
grep -Eq "^task arithmetic: acc [0-9.]+, acc_norm [0-9.]+ \(200 items\)" "$work/eval1.out" || { cat "$work/eval1.out"; fail "task line"; }
"$normlab" export --checkpoint "$work/run" --out "$work/export" > /dev/null
"$normlab" eval --checkpoint "$work/export" --data "$kjv/shards" --seq-len 64 --tasks "$kjv/tasks/kjv_next_verse.jsonl" \
  "$kjv/tasks/arithmetic.jsonl" > "$work/eval2.out" 2>&1 || { cat "$work/eval2.out"; fail "eval of the export"; }
[ "$(tail -n +2 "$work/eval1.out")" = "$(tail -n +2 "$work/eval2.out")" ] || { diff "$work/eval1.out" "$work/eval2.out"; fail "run folder and export disagree"; }

gen=(generate --checkpoint "$work/run" --prompt "In the beginning" --max-tokens 24)
"$normlab" "${gen[@]}" --temperature 0 > "$work/g1.txt"
"$normlab" "${gen[@]}" --temperature 0 --no-cache > "$work/g2.txt"
cmp "$work/g1.txt" "$work/g2.txt" || fail "greedy text differs with and without the KV cache"
grep -q "^In the beginning" "$work/g1.txt" || fail "the prompt is not echoed"
[ "$(wc -c < "$work/g1.txt")" -gt 20 ] || fail "nothing generated"
"$normlab" "${gen[@]}" --temperature 1 --top-k 50 --top-p 0.9 --seed 3 > "$work/s1.txt"
"$normlab" "${gen[@]}" --temperature 1 --top-k 50 --top-p 0.9 --seed 3 > "$work/s2.txt"
cmp "$work/s1.txt" "$work/s2.txt" || fail "sampling with one seed is not reproducible"
echo "greedy: $(head -c 80 "$work/g1.txt" | tr '\n' ' ')"
"$normlab" generate --checkpoint "$work/export" --prompt "And God said" --max-tokens 16 --temperature 0 > "$work/g3.txt"
"$python" "$src/tools/load_export.py" "$work/export" --prompt "And God said" --max-tokens 16 > "$work/g4.txt"
cmp "$work/g3.txt" "$work/g4.txt" || { cat "$work/g3.txt" "$work/g4.txt"; fail "Python's greedy text differs from normlab's"; }
echo "python: the export continues the prompt as normlab does"

# eval and analyze on the validation split written as a flat uint16 array (the shard's payload)
# and as a Megatron int32 dataset (a sequence per document): the same samples, the same numbers.
"$python" - "$kjv/shards" "$work" <<'PY' || fail "writing the validation split as other formats"
import json, struct, sys
import numpy as np
shards, work = sys.argv[1:3]
files = json.load(open(f"{shards}/index.json"))["splits"]["val"]["shards"]
assert len(files) == 1, "one validation shard expected"
ids = np.fromfile(f"{shards}/{files[0]['file']}", dtype=np.uint16, offset=64)
ids.tofile(f"{work}/val.bin")
ends = np.flatnonzero(ids == 2) + 1  # a document ends with EOS (2)
bounds = [0] + ends.tolist() + ([] if ends[-1] == len(ids) else [len(ids)])
lengths = np.diff(bounds).astype(np.int32)
ids.astype(np.int32).tofile(f"{work}/val_mega.bin")
with open(f"{work}/val_mega.idx", "wb") as f:  # Megatron-LM's .idx layout, dtype code 4 (int32)
    f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 4, len(lengths), len(lengths) + 1))
    f.write(lengths.tobytes() + (np.concatenate([[0], np.cumsum(lengths)[:-1]]) * 4).astype(np.int64).tobytes())
    f.write(np.arange(len(lengths) + 1, dtype=np.int64).tobytes())
PY
"$normlab" eval --checkpoint "$work/run" --data "$kjv/shards" > "$work/f0.out" 2>&1 || { cat "$work/f0.out"; fail "eval on shards"; }
"$normlab" eval --checkpoint "$work/run" --data "$work/val.bin" --format tokens --dtype uint16 > "$work/f1.out" 2>&1 \
  || { cat "$work/f1.out"; fail "eval --format tokens"; }
"$normlab" eval --checkpoint "$work/run" --data "$work/val_mega" --format megatron > "$work/f2.out" 2>&1 \
  || { cat "$work/f2.out"; fail "eval --format megatron"; }
want=$(sed -n 's/^val: //p' "$work/f0.out")
[ -n "$want" ] && [ "$(sed -n 's/^tokens: //p' "$work/f1.out")" = "$want" ] && [ "$(sed -n 's/^megatron: //p' "$work/f2.out")" = "$want" ] \
  || { cat "$work/f0.out" "$work/f1.out" "$work/f2.out"; fail "eval on the same tokens in other formats differs"; }
for f in shards tokens megatron; do
  data=($kjv/shards); [ $f = tokens ] && data=("$work/val.bin" --dtype uint16); [ $f = megatron ] && data=("$work/val_mega")
  "$normlab" analyze --checkpoint "$work/run" --data "${data[@]}" --format $f --no-plots --no-pruning \
    --out "$work/an_$f" > "$work/an_$f.out" 2>&1 || { cat "$work/an_$f.out"; fail "analyze --format $f"; }
done
for f in tokens megatron; do
  cmp <(tail -n +2 "$work/an_shards.out" | grep -v "^diagnostics:") <(tail -n +2 "$work/an_$f.out" | grep -v "^diagnostics:") \
    || fail "analyze --format $f differs from the shards"
done
echo "eval and analyze: shards, tokens and megatron give the same numbers ($want)"

printf '{"context": "a", "choices": [" b"], "answer": 0}\n' > "$work/bad.jsonl"
rc=0; "$normlab" eval --checkpoint "$work/run" --tasks "$work/bad.jsonl" > "$work/bad.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] && grep -q "bad.jsonl:1: choices" "$work/bad.out" || { cat "$work/bad.out"; fail "bad task file not named"; }
rc=0; "$normlab" train --config "$src/configs/tiny/lm.yaml" --set "data.train=$kjv/shards" \
  --set "data.tokenizer=$kjv/tokenizer.model" --set "eval.tasks=$work/none.jsonl" \
  --out "$work/run2" > "$work/bad2.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] && grep -q "none.jsonl" "$work/bad2.out" || { cat "$work/bad2.out"; fail "missing task file not named by train"; }
[ ! -e "$work/run2/checkpoints" ] || fail "train started despite a missing task file"
# generate's numbers are bounded before any work: a token count past the memory (it aborted the
# process in LibTorch's allocator), and sampling options out of range or not numbers, each named
# in one line, exit 1, nothing printed on stdout.
for bad in "--max-tokens 1000000000:--max-tokens.*of memory of cpu; at most [0-9]+ new tokens fit" \
           "--max-tokens 9223372036854775807:--max-tokens" "--top-p nan:--top-p.*got nan" \
           "--top-p 0:--top-p.*got 0" "--temperature -1:--temperature.*got -1$" \
           "--temperature nan:--temperature.*got nan" "--top-k -3:--top-k.*got -3"; do
  rc=0; "$normlab" generate --checkpoint "$work/run" --prompt "And" ${bad%%:*} > "$work/gbad.out" 2> "$work/gbad.err" || rc=$?
  [ "$rc" -eq 1 ] && grep -Eq -- "${bad#*:}" "$work/gbad.err" && [ ! -s "$work/gbad.out" ] \
    || { cat "$work/gbad.out" "$work/gbad.err"; fail "generate ${bad%%:*}: exit $rc, expected 1 and '${bad#*:}'"; }
  [ "$(wc -c < "$work/gbad.err")" -lt 600 ] || fail "generate ${bad%%:*}: a message of $(wc -c < "$work/gbad.err") bytes"
done
# A prompt that is not UTF-8 is refused naming the option and the byte (it became U+FFFD).
rc=0; "$normlab" generate --checkpoint "$work/run" --prompt $'And \xff' > "$work/gbad.out" 2> "$work/gbad.err" || rc=$?
[ "$rc" -eq 1 ] && grep -q -- "--prompt: not valid UTF-8 (byte 4)" "$work/gbad.err" \
  || { cat "$work/gbad.err"; fail "a prompt that is not UTF-8: exit $rc"; }
echo "PASS"
