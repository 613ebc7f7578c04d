// The Slurm launcher of a sweep: each run of a point (each early-stopping segment) one batch
// job, submitted with `sbatch --parsable`.
//
// The job script, RUN_DIR/job.sh, asks for `nodes` nodes of `gpus_per_node` tasks (one rank
// per GPU, --gpus-per-node) and runs `srun normlab train ... --resume` in the run folder; the
// trainer finds its rank in Slurm's variables, so a requeued (preempted) job resumes from its
// checkpoint. Slurm's warning before the time limit (--signal=B:TERM@120) reaches the batch
// shell, which passes one SIGTERM on to the job's steps (the trainer checkpoints and exits 4).
//
// The job ids are kept in SWEEP_DIR/slurm_jobs.json: a sweep started again in the same folder
// (after Ctrl-C, a kill or a lost login) follows the jobs still pending or running instead of
// submitting them again; squeue and `scontrol show job` tell how a job stands and ended.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "normlab/sweep/launcher.h"

namespace normlab {

struct SlurmOptions {
  std::vector<std::string> sbatch_args;  // extra sbatch options, e.g. {"--partition=gpu"}
  int nodes = 1;                         // nodes of each run
  int gpus_per_node = 0;                 // tasks (ranks) and GPUs per node; 0: CPU, 1 task
  double poll_seconds = 2;               // how often squeue is asked
};

/// Splits "--partition gpu --time=4:00:00 -A proj" into one option per element
/// ({"--partition gpu", "--time=4:00:00", "-A proj"}): a word not starting with '-' is the value
/// of the option before it.
std::vector<std::string> split_sbatch_args(const std::string& text);

/// The job script of one run (shell words quoted).
std::string slurm_job_script(const RunStart& run, const SlurmOptions& o);

/// Submits runs as Slurm jobs; `sweep_dir` holds slurm_jobs.json, `points` are the names of
/// the sweep's points (to find the runs of an earlier sweep again), `environment` (KEY=VALUE)
/// that of the Slurm commands (SLURM_CONF, PATH).
std::unique_ptr<RunLauncher> make_slurm_launcher(const SlurmOptions& o,
                                                 const std::string& sweep_dir,
                                                 std::vector<std::string> points,
                                                 const std::vector<std::string>& environment);

}  // namespace normlab
