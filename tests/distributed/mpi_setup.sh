#!/usr/bin/env bash
# Sourced by the tests in this folder once they have set work (their WORK_DIR):
#   - skips the test (exit 77) where there is no mpirun (NORMLAB_MPIRUN, default: mpirun);
#   - empties $work;
#   - runs every process, and every rank, on one thread (OMP_NUM_THREADS=1);
#   - sets mpi, the launch command line to which a test adds -n and the program: Open MPI's
#     mpirun with any number of ranks on this machine, as root too, unbound from cores, with
#     OMP_NUM_THREADS passed on and the shared-memory transport.
mpirun=${NORMLAB_MPIRUN:-mpirun}
command -v "$mpirun" >/dev/null || { echo "SKIP: no mpirun (install openmpi-bin: tools/setup.sh)"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1
# shellcheck disable=SC2034  # used by the tests that source this file
mpi=("$mpirun" --oversubscribe --allow-run-as-root --bind-to none -x OMP_NUM_THREADS --mca btl self,vader)
