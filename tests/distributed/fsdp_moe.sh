#!/usr/bin/env bash
# FSDP with Mixture-of-Experts blocks (configs/moe/tiny.yaml: 8 experts, top-2, every block) over
# Open MPI on CPU, against one process with the same global batch: W = 2 and W = 3 (uneven
# shards) give the same cross-entropy and the same load-balancing loss at every step, within the
# dense FSDP test's 1e-5 relative (tests/distributed/fsdp.sh: sums over the batch run in another
# order on W ranks, float32); so do W = 2 with activation checkpointing of every block and W = 2
# with the grouped dispatch (model.moe.dispatch = grouped: the experts' stacked weights,
# gathered per unit, go to the grouped GEMMs as they are).
# Routing is discrete: a token whose top-2 is decided by a margin below that rounding would
# change experts and move the loss by far more, which these runs do not show.
# Usage: fsdp_moe.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR (run by CTest, label dist)
set -euo pipefail
normlab=$1 src=$2 kjv=$3 python=$4 work=$5
source "$(dirname "${BASH_SOURCE[0]}")/mpi_setup.sh"
args=(--config "$src/configs/moe/tiny.yaml" --set "data.train=$kjv/shards" --set "data.tokenizer=$kjv/tokenizer.model"
      --set train.steps=12 --set train.global_batch=12 --set train.micro_batch=2 --set eval.every=0
      --set eval.batches=2 --set checkpoint.at_end=false --set logging.every=1000
      --set distributed.timeout_seconds=60)
"$normlab" train "${args[@]}" --out "$work/w1" > "$work/w1.out" 2>&1 || { cat "$work/w1.out"; echo "FAIL: single run"; exit 1; }
for w in 2 3; do
  "${mpi[@]}" -n $w "$normlab" train "${args[@]}" --out "$work/w$w" > "$work/w$w.out" 2>&1 \
    || { cat "$work/w$w.out"; echo "FAIL: mpirun -n $w"; exit 1; }
done
"${mpi[@]}" -n 2 "$normlab" train "${args[@]}" --set train.activation_checkpointing=block \
  --out "$work/w2-recompute" > "$work/w2-rc.out" 2>&1 || { cat "$work/w2-rc.out"; echo "FAIL: W=2 recompute"; exit 1; }
"${mpi[@]}" -n 2 "$normlab" train "${args[@]}" --set model.moe.dispatch=grouped \
  --out "$work/w2-grouped" > "$work/w2-gr.out" 2>&1 || { cat "$work/w2-gr.out"; echo "FAIL: W=2 grouped"; exit 1; }
"$python" - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def lines(run):
    return [json.loads(l) for l in open(f"{work}/{run}/metrics.jsonl")]
ref = lines("w1")
assert len(ref) == 12 and all("moe_lb_loss" in l for l in ref), ref[:1]
for run in ("w2", "w3", "w2-recompute", "w2-grouped"):
    got = lines(run)
    assert len(got) == 12, (run, len(got))
    for key in ("loss", "moe_lb_loss", "moe_router_z_loss"):
        rel = max(abs(a[key] - b[key]) / abs(a[key]) for a, b in zip(ref, got))
        print(f"{run}: {key} within {rel:.1e} of one process")
        assert rel <= 1e-5, (run, key, rel)
    idle = [(a["moe_idle_experts"], b["moe_idle_experts"]) for a, b in zip(ref, got)]
    assert all(a == b for a, b in idle), (run, idle)
print(f"lb loss: step 1 {ref[0]['moe_lb_loss']:.4f}, step 12 {ref[-1]['moe_lb_loss']:.4f}")
PY
echo "FSDP with MoE: PASS"
