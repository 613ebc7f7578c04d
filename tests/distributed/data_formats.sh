#!/usr/bin/env bash
# Training on data written by other tools (tests/reference/token_formats.py: a numpy uint16 token
# array and a Megatron indexed dataset), as a 0.7/0.3 mixture, with a Megatron validation set:
#   1. one process and mpirun -n 2 (FSDP) give the same losses at every step (1e-5 relative:
#      the same global batches, summed in another order);
#   2. each run stopped at step 6 and resumed gives bitwise the losses of the uninterrupted run;
#   3. the log states each source's share and that the small source repeats.
# Run by CTest (label dist). Usage: data_formats.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR
# Env: NORMLAB_MPIRUN (default: mpirun)
set -euo pipefail
normlab=$1 src=$2 python=$4 work=$5
source "$(dirname "${BASH_SOURCE[0]}")/mpi_setup.sh"
rc=0
"$python" "$src/tests/reference/token_formats.py" "$work/d" 1000 > "$work/writer.out" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || { cat "$work/writer.out"; echo "FAIL: writer"; exit 1; }
d=$work/d
args=(--config "$src/configs/tiny/lm.yaml"
      --set "data.train=[{path: $d/mix_a.bin, format: tokens, dtype: uint16, eos: 0, weight: 0.7}, {path: $d/mix_b, format: megatron, weight: 0.3}]"
      --set "data.val={path: $d/mega32, format: megatron}" --set data.tokenizer=
      --set train.steps=12 --set train.global_batch=8 --set train.micro_batch=2 --set eval.every=6
      --set checkpoint.every=6 --set logging.every=1000 --set distributed.timeout_seconds=30)

"$normlab" train "${args[@]}" --out "$work/w1" > "$work/w1.out" 2>&1 || { cat "$work/w1.out"; echo "FAIL: one process"; exit 1; }
"${mpi[@]}" -n 2 "$normlab" train "${args[@]}" --out "$work/w2" > "$work/w2.out" 2>&1 \
  || { cat "$work/w2.out"; echo "FAIL: mpirun -n 2"; exit 1; }
for w in 1 2; do
  launch=("$normlab"); [ $w -eq 2 ] && launch=("${mpi[@]}" -n 2 "$normlab")
  rc=0
  "${launch[@]}" train "${args[@]}" --out "$work/w${w}r" --stop-after 6 > "$work/w${w}r1.out" 2>&1 || rc=$?
  [ "$rc" -eq 4 ] || { cat "$work/w${w}r1.out"; echo "FAIL: W=$w --stop-after 6 exited $rc, expected 4"; exit 1; }
  "${launch[@]}" train "${args[@]}" --out "$work/w${w}r" --resume > "$work/w${w}r2.out" 2>&1 \
    || { cat "$work/w${w}r2.out"; echo "FAIL: W=$w resume"; exit 1; }
done

"$python" - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def steps(run):
    return [(j["step"], j["loss"], j["grad_norm"]) for j in map(json.loads, open(f"{work}/{run}/metrics.jsonl"))
            if "grad_norm" in j]
w1, w2 = steps("w1"), steps("w2")
assert len(w1) == 12 and len(w2) == 12, (len(w1), len(w2))
worst = max(abs(a[1] - b[1]) / abs(a[1]) for a, b in zip(w1, w2))
assert worst < 1e-5, worst
print(f"mixture, 1 process and 2 ranks: losses within {worst:.1e} relative at all 12 steps")
for w in ("w1", "w2"):
    a, b = steps(w), steps(w + "r")
    assert a == b, [(x, y) for x, y in zip(a, b) if x != y][:3]
print("stopped at step 6 and resumed, on 1 process and on 2 ranks: losses and gradient norms bitwise equal")
PY
grep -q "data source 0 (tokens .*mix_a.bin): .* weight 0.7, [0-9.]*% of the run's tokens" "$work/w1.out" \
  || { cat "$work/w1.out"; echo "FAIL: source 0's share not in the log"; exit 1; }
grep -q "data source 1 (megatron .*mix_b): .* weight 0.3, [0-9.]*% of the run's tokens.*it repeats" "$work/w1.out" \
  || { cat "$work/w1.out"; echo "FAIL: source 1's share or repetition not in the log"; exit 1; }
grep -q "data source 1 (.*mix_b) begins epoch 1 at step" "$work/w1.out" \
  || { cat "$work/w1.out"; echo "FAIL: no epoch line for the small source"; exit 1; }
echo "the log states each source's share and the small source's epochs"
echo "PASS"
