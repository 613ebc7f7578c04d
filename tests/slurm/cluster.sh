#!/usr/bin/env bash
# A one-node Slurm cluster on localhost for the tests: munged, slurmctld and slurmd from
# Debian's munge and slurm-wlm packages, with every file (configuration, munge key and socket,
# state, spool, logs) in DIR and ports off the defaults, so that it disturbs nothing else.
#   cluster.sh start DIR   writes DIR/slurm.conf, starts the daemons, waits until the node is
#                          idle; prints the environment to use it (SLURM_CONF=...). Exit 77
#                          where it cannot run here (not root, packages missing, daemons fail).
#   cluster.sh stop DIR    stops the daemons started in DIR (by their pid files).
# Clients: export SLURM_CONF=DIR/slurm.conf (the munge socket is named in slurm.conf).
set -euo pipefail
cmd=${1:-} dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: cluster.sh start|stop DIR" >&2; exit 2; }
skip() { echo "SKIP: $*"; exit 77; }

stop() {
  # The jobs first (their slurmstepd outlives slurmd), then the daemons.
  if [ -f "$dir/slurm.conf" ] && [ -f "$dir/run/slurmctld.pid" ]; then
    SLURM_CONF=$dir/slurm.conf scancel --full --signal=KILL --user="$(id -un)" 2>/dev/null || true
    SLURM_CONF=$dir/slurm.conf scancel --user="$(id -un)" 2>/dev/null || true
    for _ in $(seq 100); do
      [ -z "$(SLURM_CONF=$dir/slurm.conf squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.2
    done
  fi
  for f in slurmd slurmctld munged; do
    [ -f "$dir/run/$f.pid" ] || continue
    pid=$(cat "$dir/run/$f.pid")
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$dir/run/$f.pid"
  done
}

if [ "$cmd" = stop ]; then stop; exit 0; fi
[ "$cmd" = start ] || { echo "usage: cluster.sh start|stop DIR" >&2; exit 2; }

[ "$(id -u)" -eq 0 ] || skip "the Slurm daemons run as root here (SlurmUser=root)"
for t in munged mungekey slurmctld slurmd sbatch srun squeue scontrol scancel; do
  command -v "$t" >/dev/null || [ -x "/usr/sbin/$t" ] || skip "$t missing (Debian packages slurm-wlm munge)"
done
PATH=$PATH:/usr/sbin
mkdir -p "$dir"/{run,state,spool,log,munge}
dir=$(cd "$dir" && pwd)
chmod 700 "$dir/munge"
[ -f "$dir/munge/munge.key" ] || mungekey -c -k "$dir/munge/munge.key" >/dev/null 2>&1 \
  || dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge/munge.key"
socket=$dir/munge/munge.socket
munged --force -S "$socket" --key-file "$dir/munge/munge.key" --pid-file "$dir/run/munged.pid" \
  --log-file "$dir/log/munged.log" --seed-file "$dir/munge/munge.seed" >/dev/null 2>&1 \
  || skip "munged did not start (see $dir/log/munged.log)"

host=$(hostname -s)
cpus=$(nproc); [ "$cpus" -le 2 ] || cpus=2
# Ports off the defaults (6817/6818), derived from DIR so that two clusters rarely collide.
base=$((20000 + $(cksum <<< "$dir" | cut -d' ' -f1) % 20000))
cat > "$dir/slurm.conf" <<CONF
ClusterName=normlabtest
SlurmctldHost=$host
SlurmctldPort=$base
SlurmdPort=$((base + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
MinJobAge=3600
ReturnToService=2
MpiDefault=none
KillWait=10
SchedulerParameters=sched_interval=1
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$dir/slurm.conf
slurmctld -f "$SLURM_CONF" >"$dir/log/slurmctld.out" 2>&1 || { stop; skip "slurmctld did not start (see $dir/log/slurmctld.log)"; }
slurmd -f "$SLURM_CONF" >"$dir/log/slurmd.out" 2>&1 || { stop; skip "slurmd did not start (see $dir/log/slurmd.log)"; }
for _ in $(seq 60); do
  state=$(sinfo -h -o %t 2>/dev/null | head -1 || true)
  case $state in idle*) echo "SLURM_CONF=$SLURM_CONF"; exit 0 ;; esac
  sleep 0.5
done
tail -5 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
stop
skip "the Slurm node did not become idle (state '${state:-}')"
