#!/usr/bin/env bash
# Launch safety over Open MPI on CPU (docs/distributed.md, "Launch safety"): ranks started with
# different settings stop before the first collective of training, within seconds, with one
# line naming what differs and on which rank:
#   1. rank 1 gets another optimizer.lr (a per-rank --set through a wrapper that reads
#      OMPI_COMM_WORLD_RANK): "config hash differs (rank 0 has ..., rank 1 has ...)";
#   2. rank 1 gets another train.seed: the config hash and the initial weights both differ;
#   3. the same settings on both ranks train (2 steps).
# Run by CTest (label dist) on the built-in corpus fixture.
# Usage: launch_safety.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR   (env NORMLAB_MPIRUN)
set -euo pipefail
normlab=$1 src=$2 kjv=$3 work=$5
source "$(dirname "${BASH_SOURCE[0]}")/mpi_setup.sh"
args=(--config "$src/configs/tiny/lm.yaml" --set "data.train=$kjv/shards" --set "data.tokenizer=$kjv/tokenizer.model"
      --set train.steps=2 --set train.global_batch=4 --set train.micro_batch=2 --set eval.every=0
      --set eval.batches=1 --set checkpoint.every=0 --set checkpoint.at_end=false --set logging.every=1000
      --set distributed.timeout_seconds=20)
fail() { echo "FAIL: $*"; exit 1; }

# per_rank.sh SET...: normlab with the extra --set arguments on rank 1 only.
cat > "$work/per_rank.sh" <<WRAP
#!/usr/bin/env bash
if [ "\${OMPI_COMM_WORLD_RANK:-0}" = 1 ]; then
  extra=(); for kv in \$PER_RANK_SET; do extra+=(--set "\$kv"); done
  exec "$normlab" "\$@" "\${extra[@]}"
fi
exec "$normlab" "\$@"
WRAP
chmod +x "$work/per_rank.sh"

# mismatch NAME SETS EXPECT...: mpirun -n 2 with SETS on rank 1 fails within 60 s and prints,
# on each rank, one error line holding every EXPECT pattern (extended regexes).
mismatch() {
  local name=$1 sets=$2; shift 2
  local t0=$SECONDS rc=0
  PER_RANK_SET=$sets timeout 120 "${mpi[@]}" -n 2 -x PER_RANK_SET "$work/per_rank.sh" train "${args[@]}" \
    --out "$work/$name" > "$work/$name.out" 2>&1 || rc=$?
  local secs=$((SECONDS - t0))
  [ $rc -ne 0 ] || { cat "$work/$name.out"; fail "$name: the job succeeded"; }
  [ $rc -ne 124 ] || { cat "$work/$name.out"; fail "$name: the job hung"; }
  [ $secs -le 60 ] || fail "$name: the job took $secs s to stop"
  local line
  line=$(grep "^normlab train: rank 0 of 2: error: ranks disagree before training: " "$work/$name.out") \
    || { cat "$work/$name.out"; fail "$name: no disagreement line from rank 0"; }
  [ "$(printf '%s\n' "$line" | wc -l)" -eq 1 ] || fail "$name: more than one line: $line"
  for want in "$@"; do
    printf '%s\n' "$line" | grep -Eq "$want" || fail "$name: '$want' not in: $line"
  done
  [ ! -e "$work/$name/metrics.jsonl" ] || [ ! -s "$work/$name/metrics.jsonl" ] \
    || fail "$name: a step was trained"
  echo "$name: stopped in $secs s: ${line#normlab train: rank 0 of 2: error: }"
}

mismatch lr "optimizer.lr=0.002" \
  "config hash differs \(rank 0 has [0-9a-f]{16}, rank 1 has [0-9a-f]{16}; give every rank the same --config and --set\)$"
mismatch seed "train.seed=7" "config hash differs \(rank 0 has" \
  "; initial weights checksum differs \(rank 0 has [0-9a-f]{16}, rank 1 has [0-9a-f]{16};"

rc=0
PER_RANK_SET="" "${mpi[@]}" -n 2 -x PER_RANK_SET "$work/per_rank.sh" train "${args[@]}" --out "$work/same" \
  > "$work/same.out" 2>&1 || rc=$?
[ $rc -eq 0 ] || { cat "$work/same.out"; fail "ranks with the same settings did not train"; }
grep -q "run completed after 2 steps" "$work/same.out" || { cat "$work/same.out"; fail "no completed run"; }
echo "the same settings on both ranks: trained 2 steps"
echo "PASS"
