// Learning-rate sweeps: a grid of schemes x learning rates x seeds over one base config, each
// point a child `normlab train` in its own run folder.
//
// SWEEP_DIR holds sweep.json (the grid and the settings it was started with: sweep_manifest.h),
// sweep.lock (held while a sweep runs there), runs/<point>/ (a normal run folder plus console.log,
// the child's stdout and stderr) and the reports (sweep_report.h). All state is on disk: running
// the same sweep again skips points whose run completed or diverged, resumes interrupted or
// crashed ones from their newest checkpoint, and starts the rest.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "normlab/config/config.h"
#include "normlab/config/sweep_grid.h"
#include "normlab/sweep/point_state.h"
#include "normlab/sweep/slurm.h"

namespace normlab {

class OutputFiles;  // util/output_contract.h

/// Splits the visible devices into disjoint sets of `per_run` ("0,1,2,3", 2 -> {"0,1", "2,3"}).
std::vector<std::string> gpu_slots(const std::vector<std::string>& devices, int per_run);

/// The command line of one point's run: `normlab train --config C --set ... --out RUN_DIR
/// --resume` (train_flags.h) (with --set train.device=cuda on GPUs, where the child sees only its
/// slot's devices), behind `launcher --no-python --standalone --nproc-per-node K` when K = ranks
/// > 1. Throws std::invalid_argument when K > 1 and there is no launcher.
std::vector<std::string> point_command(const SweepPoint& point, const std::string& config,
                                       const std::string& normlab, const std::string& run_dir,
                                       bool gpu, int ranks,
                                       const std::vector<std::string>& launcher);

struct SweepOptions {
  std::string out;      // SWEEP_DIR
  std::string normlab;  // the normlab executable the children run
  std::vector<std::string>
      environment;                    // KEY=VALUE the children inherit (main passes its own);
                                      // CUDA_VISIBLE_DEVICES and OMP_NUM_THREADS in it are honoured
  std::vector<std::string> launcher;  // starts a run of gpus_per_run > 1 ranks, e.g. {python, "-m",
                                      // "torch.distributed.run"} (torchrun; point_command)
  const std::atomic<int>* stop =
      nullptr;  // 1: stop children (SIGTERM) and launch no more; 2: kill them
  std::function<void(const std::string&)> say;  // progress lines (may be empty)
  bool resume_stopped = false;      // run the points that early stopping stopped to the end
  bool use_slurm = false;           // each run a Slurm job (slurm.h) instead of a child process
  SlurmOptions slurm;               // with use_slurm
  OutputFiles* contract = nullptr;  // the reports' output contract (write_sweep_reports)
};

struct SweepOutcome {
  int completed = 0, diverged = 0, crashed = 0, interrupted = 0, skipped = 0, stopped = 0;
  int64_t steps_saved = 0;  // by early stopping, against the whole grid run to the end
};

/// Runs every point not yet finished, `jobs` at a time (on Slurm: jobs in the queue, 0 = all),
/// then writes the reports. With
/// spec.early_stop.asha each point runs rung by rung (`--stop-after`, pausing with a checkpoint)
/// and only the points ASHA promotes go on (asha.h); the others end as stopped. Throws when
/// SWEEP_DIR holds a different sweep or another sweep is running in it.
SweepOutcome run_sweep(const SweepSpec& spec, const SweepOptions& options);

}  // namespace normlab
