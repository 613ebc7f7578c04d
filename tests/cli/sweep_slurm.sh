#!/usr/bin/env bash
# `normlab sweep --launcher slurm` against a real one-node Slurm on this machine
# (tests/slurm/cluster.sh: munged, slurmctld and slurmd with everything in a temporary folder;
# the test is skipped, exit 77, where they cannot start). CTest label slow.
#   1. bad input: an sbatch option sbatch rejects, and no sbatch on PATH, are errors naming the
#      point; nothing is left submitted;
#   2. a 2 x 2 CPU sweep of configs/tiny, its jobs held (sbatch --hold) so that nothing depends on
#      timing: kill -9 of the sweep leaves its 4 jobs queued; the same command again follows them
#      (submits nothing); a job cancelled from outside (scancel) is recorded as crashed with its
#      Slurm state and log; once released the other 3 complete (exit 5); the next run resubmits
#      the cancelled point only; the table is the local runner's and every validation loss
#      equals that of the same sweep run locally;
#   3. a running job requeued (scontrol requeue) resumes from its checkpoint (train.log:
#      "resumed from"); Ctrl-C of the sweep sends the job one SIGTERM: it checkpoints, the sweep
#      exits 4; the same command again finishes the run;
#   4. early stopping (ASHA, one job at a time): the same stopped points, steps and validation
#      losses as the same sweep run locally, also when the sweep is killed (kill -9) while a
#      promoted point's job runs and the next sweep follows that job.
# Usage: sweep_slurm.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR
set -euo pipefail
normlab=$1 src=$2 kjv=$3 python=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
# The cluster's sockets live under it: a short path.
cluster=$(mktemp -d /tmp/normlab-slurm.XXXXXX)
cleanup() { [ -z "${pid:-}" ] || kill -9 "$pid" 2>/dev/null || true; "$src/tests/slurm/cluster.sh" stop "$cluster" || true; rm -rf "$cluster"; }
trap cleanup EXIT
rc=0; "$src/tests/slurm/cluster.sh" start "$cluster" > "$work/cluster.out" 2>&1 || rc=$?
[ "$rc" -ne 77 ] || { cat "$work/cluster.out"; exit 77; }
[ "$rc" -eq 0 ] || { cat "$work/cluster.out"; fail "cluster.sh start: exit $rc"; }
export SLURM_CONF=$cluster/slurm.conf OMP_NUM_THREADS=1 NORMLAB_SLURM_POLL=0.3
t0=$(date +%s)

# wait_until SECONDS WHAT COMMAND...: polls COMMAND every 0.2 s.
wait_until() {
  local limit=$1 what=$2; shift 2
  local end=$(( $(date +%s) + limit ))
  until "$@"; do
    [ "$(date +%s)" -lt "$end" ] || { squeue -t all || true; fail "timed out waiting for $what"; }
    sleep 0.2
  done
}
jobs_in() { "$python" -c "import json,sys; print(len(json.load(open(sys.argv[1]))['jobs']))" "$1/slurm_jobs.json" 2>/dev/null || echo 0; }
job_of() { "$python" -c "import json,sys; print(json.load(open(sys.argv[1]))['jobs'][sys.argv[2]]['job'])" "$1/slurm_jobs.json" "$2"; }
has_jobs() { [ "$(jobs_in "$1")" -eq "$2" ]; }
queued() { squeue -h -t all -o '%i %T' | awk '$2=="PENDING"||$2=="RUNNING"||$2=="COMPLETING"' | wc -l; }
common=(--config "$src/configs/tiny/lm.yaml" --set "data.train=$kjv/shards" --set "data.tokenizer=$kjv/tokenizer.model"
        --set logging.every=1000 --no-plots)

# ---- 1. bad input -------------------------------------------------------------------------------
one=("$normlab" sweep "${common[@]}" --scheme pre_norm --lr 1e-3 --set train.steps=5 --launcher slurm)
rc=0; "${one[@]}" --slurm-args "--no-such-option=1" --out "$work/bad" > "$work/bad.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || { cat "$work/bad.out"; fail "an option sbatch rejects: exit $rc, expected 1"; }
grep -q "pre_norm-lr1e-3-s0: sbatch rejected the job" "$work/bad.out" || { cat "$work/bad.out"; fail "the error does not name the point"; }
grep -q "no-such-option" "$work/bad.out" || { cat "$work/bad.out"; fail "the error does not quote sbatch"; }
mkdir -p "$work/empty_path"
rc=0; PATH=$work/empty_path "${one[@]}" --out "$work/nosbatch" > "$work/nosbatch.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] && grep -q "pre_norm-lr1e-3-s0: cannot run sbatch" "$work/nosbatch.out" \
  || { cat "$work/nosbatch.out"; fail "no sbatch on PATH: exit $rc"; }
rc=0; "$normlab" sweep "${common[@]}" --scheme pre_norm --lr 1e-3 --gpus-per-node 1 --out "$work/x" > "$work/local_flags.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "need --launcher slurm" "$work/local_flags.out" || { cat "$work/local_flags.out"; fail "Slurm flags without --launcher slurm"; }
[ "$(queued)" -eq 0 ] || fail "bad input left jobs in the queue"
echo "bad input: ok"

# ---- 2. kill -9 and re-attach, a job cancelled from outside, the report ------------------------
grid=("$normlab" sweep "${common[@]}" --scheme pre_norm,siamese_hybrid --lr 1e-3,3e-3 --set train.steps=10
      --launcher slurm --out "$work/grid")
"${grid[@]}" --slurm-args "--hold" > "$work/grid1.out" 2>&1 &
pid=$!
wait_until 60 "4 submitted jobs" has_jobs "$work/grid" 4
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
[ "$(squeue -h -t PENDING -o %i | wc -l)" -eq 4 ] || { squeue -t all; fail "the jobs did not outlive the sweep"; }
ls "$work"/grid/runs/*/summary.json >/dev/null 2>&1 && fail "a held job ran"
"${grid[@]}" --slurm-args "--hold" > "$work/grid2.out" 2>&1 &
pid=$!
wait_until 60 "the sweep to follow its 4 jobs" grep -qs "4 still running, 0 to run" "$work/grid2.out"
[ "$(grep -c '^follow ' "$work/grid2.out")" -eq 4 ] || { cat "$work/grid2.out"; fail "follow lines"; }
! grep -q '^start\|^resume' "$work/grid2.out" || { cat "$work/grid2.out"; fail "the second sweep submitted again"; }
victim=pre_norm-lr3e-3-s0
vid=$(job_of "$work/grid" $victim)
scancel "$vid"
wait_until 60 "the cancelled job to be recorded" grep -qs "$victim: crashed (Slurm CANCELLED" "$work/grid2.out"
for p in pre_norm-lr1e-3-s0 siamese_hybrid-lr1e-3-s0 siamese_hybrid-lr3e-3-s0; do scontrol release "$(job_of "$work/grid" $p)"; done
rc=0; wait "$pid" || rc=$?
[ "$rc" -eq 5 ] || { cat "$work/grid2.out"; fail "a cancelled job: exit $rc, expected 5"; }
"$python" - "$work/grid/runs/$victim/sweep_status.json" "$vid" <<'PY' || fail "sweep_status.json of the cancelled point"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["state"] == "crashed" and j["slurm_state"] == "CANCELLED", j
assert j["log"].endswith(f"/slurm-{sys.argv[2]}.out"), j
PY
grep -q "| pre_norm | .* | crashed (Slurm CANCELLED" "$work/grid/summary.md" || grep -q "crashed" "$work/grid/summary.md" || { cat "$work/grid/summary.md"; fail "the table does not show the crash"; }
"${grid[@]}" > "$work/grid3.out" 2>&1 || { cat "$work/grid3.out"; fail "the third sweep"; }
grep -q "3 finished before, 1 to run" "$work/grid3.out" || { cat "$work/grid3.out"; fail "resubmission plan"; }
grep -Eq "^(start |resume) $victim \(Slurm job" "$work/grid3.out" || { cat "$work/grid3.out"; fail "the cancelled point was not resubmitted"; }
grep -Eq '^\| scheme \| 1e-3 \| 3e-3 \|$' "$work/grid/summary.md" || { cat "$work/grid/summary.md"; fail "table header"; }
[ "$(wc -l < "$work/grid/summary.csv")" -eq 5 ] || fail "summary.csv should have a header and 4 rows"
[ "$(jobs_in "$work/grid")" -eq 0 ] || fail "slurm_jobs.json still lists jobs"
"$normlab" sweep "${common[@]}" --scheme pre_norm,siamese_hybrid --lr 1e-3,3e-3 --set train.steps=10 \
  --jobs 2 --out "$work/local" > "$work/local.out" 2>&1 || { cat "$work/local.out"; fail "the local sweep"; }
"$python" - "$work/grid/summary.json" "$work/local/summary.json" <<'PY' || fail "Slurm and local sweeps differ"
import json, sys
a, b = ({r["run"]: (r["status"], r["val_loss"]) for r in json.load(open(p))["runs"]} for p in sys.argv[1:])
assert a == b, (a, b)
assert all(s == "completed" for s, _ in a.values()), a
PY
echo "kill -9, re-attach, scancel, resubmission, report: ok"

# ---- 3. requeue resumes from the checkpoint; Ctrl-C checkpoints ---------------------------------
# 240 steps: the Ctrl-C comes about 20 steps after the resumption (step 38 on a 2-core Xeon,
# 2026-12-06), which leaves the run 200 steps from its end; the last command runs those.
long=("$normlab" sweep "${common[@]}" --scheme pre_norm --lr 1e-3 --set train.steps=240
      --set checkpoint.every=20 --launcher slurm --out "$work/long")
run=$work/long/runs/pre_norm-lr1e-3-s0
"${long[@]}" > "$work/long1.out" 2>&1 &
pid=$!
wait_until 120 "a first checkpoint" test -d "$run/checkpoints/step-00000020"
id=$(job_of "$work/long" pre_norm-lr1e-3-s0)
scontrol requeue "$id"
wait_until 60 "the requeued job to wait" sh -c "squeue -h -j $id -o %T | grep -q PENDING"
scontrol update JobId="$id" StartTime=now   # Slurm delays a requeued job's start otherwise
# (the job's output, not train.log: that file is flushed at warnings and at the end)
wait_until 120 "the requeued job to resume" grep -qs "resumed from" "$run/slurm-$id.out"
grep -q "(restart 1)" "$run/slurm-$id.out" || { cat "$run/slurm-$id.out"; fail "no restart in the job's log"; }
! grep -qs '"status": "completed"' "$run/summary.json" || fail "the run finished before Ctrl-C (too fast a machine for this test)"
kill -INT "$pid"
rc=0; wait "$pid" || rc=$?
[ "$rc" -eq 4 ] || { cat "$work/long1.out"; fail "Ctrl-C: exit $rc, expected 4"; }
grep -q '"status": "interrupted"' "$run/summary.json" || { cat "$run/slurm-$id.out"; fail "the job did not checkpoint on Ctrl-C"; }
stopped_at=$("$python" -c "import json; print(json.load(open('$run/summary.json'))['steps'])")
"${long[@]}" > "$work/long2.out" 2>&1 || { cat "$work/long2.out"; fail "after Ctrl-C"; }
grep -q '"status": "completed"' "$run/summary.json" || fail "the run did not complete"
[ "$(grep -c "resumed from" "$run/train.log")" -eq 2 ] || { cat "$run/train.log"; fail "train.log: expected two resumptions (the requeue, then after Ctrl-C)"; }
grep -q "resumed from .* at step $stopped_at" "$run/train.log" || fail "the last job did not resume from step $stopped_at"
echo "requeue and Ctrl-C: ok"

# ---- 4. early stopping: the same decisions and losses as the local runner -----------------------
asha=(sweep "${common[@]}" --scheme pre_norm --lr 1e-6,1e-5,1e-3,4e-3 --set train.steps=40 --set eval.every=10
      --set eval.batches=4 --set checkpoint.every=10 --early-stop asha --reduction 3 --jobs 1)
"$normlab" "${asha[@]}" --launcher slurm --out "$work/asha" > "$work/asha.out" 2>&1 || { cat "$work/asha.out"; fail "ASHA on Slurm"; }
"$normlab" "${asha[@]}" --out "$work/asha_local" > "$work/asha_local.out" 2>&1 || { cat "$work/asha_local.out"; fail "ASHA locally"; }
"$python" - "$work/asha/summary.json" "$work/asha_local/summary.json" <<'PY' || fail "ASHA on Slurm and locally differ"
import json, sys
a, b = ({r["run"]: (r["status"], r["steps"], r["val_loss"]) for r in json.load(open(p))["runs"]} for p in sys.argv[1:])
assert a == b, (a, b)
assert a["pre_norm-lr1e-6-s0"][:2] == ("stopped", 10), a
PY
grep -q "stopped early" "$work/asha.out" || fail "no early stopping on Slurm"
# kill -9 of the sweep while a promoted point's job runs; the next sweep follows that job.
"$normlab" "${asha[@]}" --launcher slurm --out "$work/asha_kill" > "$work/asha_kill1.out" 2>&1 &
pid=$!
wait_until 120 "a promotion" grep -qs "^resume" "$work/asha_kill1.out"
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
"$normlab" "${asha[@]}" --launcher slurm --out "$work/asha_kill" > "$work/asha_kill2.out" 2>&1 || { cat "$work/asha_kill2.out"; fail "ASHA after kill -9"; }
grep -q "^follow " "$work/asha_kill2.out" || { cat "$work/asha_kill1.out" "$work/asha_kill2.out"; fail "the promoted job was not followed"; }
"$python" - "$work/asha_kill/summary.json" "$work/asha_local/summary.json" <<'PY' || fail "ASHA after kill -9 and re-attach differs from the local run"
import json, sys
a, b = ({r["run"]: (r["status"], r["steps"], r["val_loss"]) for r in json.load(open(p))["runs"]} for p in sys.argv[1:])
assert a == b, (a, b)
PY
echo "PASS: Slurm sweeps: bad input, kill -9 and re-attach, scancel and resubmission, the local runner's report, requeue resumed, Ctrl-C at step $stopped_at, early stopping as locally, also across kill -9 ($(( $(date +%s) - t0 )) s)"
