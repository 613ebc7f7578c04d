#!/usr/bin/env bash
# The training-step oracle (tests/reference/train_oracle.py): `normlab train` in float64 for 3
# steps from the oracle's initial weights and data, then every parameter after each step and
# each logged loss against the oracle's independent PyTorch computation.
# Usage: train_oracle.sh NORMLAB PYTHON WORK [--fsdp MPIRUN]
#   without --fsdp: one process, schemes pre_norm and siamese_hybrid;
#   with --fsdp:    FSDP over 2 MPI ranks (siamese_hybrid), its sharded checkpoints consolidated.
# Prints PASS when all agree; fails without Python's torch (tools/setup.sh installs it); exits
# 77 (skipped) without mpirun.
set -euo pipefail
normlab=$1 python=$2 work=$3
mpirun=
[ "${4:-}" = --fsdp ] && mpirun=${5:?train_oracle.sh: --fsdp needs the mpirun command}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rm -rf "$work" && mkdir -p "$work"
if [ -n "$mpirun" ] && ! command -v "$mpirun" > /dev/null; then
  echo "SKIP: no $mpirun (install openmpi-bin: tools/setup.sh)"; exit 77
fi
schemes=(pre_norm siamese_hybrid)
[ -n "$mpirun" ] && schemes=(siamese_hybrid)
export OMP_NUM_THREADS=1
for scheme in "${schemes[@]}"; do
  case=$work/$scheme
  rc=0; "$python" "$here/train_oracle.py" make "$work" --scheme "$scheme" || rc=$?
  [ $rc = 0 ] || { echo "FAIL: the oracle of $scheme"; exit 1; }
  train=("$normlab" train --config "$case/config.yaml" --init-from "$case/init.safetensors" --out "$case/run")
  [ -n "$mpirun" ] && train=("$mpirun" --oversubscribe --allow-run-as-root --bind-to none
                             -x OMP_NUM_THREADS --mca btl self,vader -n 2 "${train[@]}")
  "${train[@]}" > "$case/train.out" 2>&1 || { cat "$case/train.out"; echo "FAIL: normlab train ($scheme)"; exit 1; }
  models=()
  for step in 1 2 3; do
    ckpt=$case/run/checkpoints/$(printf 'step-%08d' $step)
    if [ -n "$mpirun" ]; then
      ls "$ckpt"/model.rank-* > /dev/null || { echo "FAIL: step $step was not saved sharded"; exit 1; }
      "$normlab" checkpoint consolidate --checkpoint "$ckpt" --out "$case/whole-$step" > /dev/null
      ckpt=$case/whole-$step/checkpoints/$(printf 'step-%08d' $step)
    fi
    models+=("$ckpt/model.safetensors")
  done
  "$python" "$here/train_oracle.py" check "$case" "$case/run/metrics.jsonl" "${models[@]}" \
    || { echo "FAIL: $scheme disagrees with the oracle"; exit 1; }
done
echo "PASS: ${schemes[*]} equal the oracle at every step${mpirun:+ (FSDP, 2 ranks)}"
