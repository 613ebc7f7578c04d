// The single-process trainer: `normlab train` runs it on a resolved RunConfig.
//
// RUN_DIR holds config.yaml (resolved), train.log, metrics.jsonl (one line per step, with the
// validation numbers on evaluation steps), diagnostics.jsonl (with diagnostics.every),
// summary.json (at the end), checkpoints/ (checkpoint.h) and .lock (held while training; a
// second process on the folder is refused). A run ends as
//   completed   (exit code 0)  all train.steps done, final evaluation and checkpoint written
//   diverged    (exit code 3)  a non-finite loss or gradient norm (unless train.skip_nonfinite)
//   interrupted (exit code 4)  the stop flag was raised (SIGINT/SIGTERM): a checkpoint was saved,
//                              `--resume` continues exactly where it stopped
// With a communicator of world W > 1 the same loop runs on every rank over an Fsdp-wrapped
// model: each rank reads its slice of every global batch, losses and evaluation numbers are
// averaged over ranks, the stop flag is agreed on (any rank's signal stops all after the same
// step), and checkpoints are sharded (checkpoint.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "normlab/config.h"
#include "normlab/log.h"

namespace normlab {

enum class RunStatus { Completed, Diverged, Interrupted };

// clang-format off
template <> struct EnumNames<RunStatus> {
  static constexpr NameRow<RunStatus> rows[] = {
    {RunStatus::Completed, "completed"}, {RunStatus::Diverged, "diverged"}, {RunStatus::Interrupted, "interrupted"}};
};
// clang-format on

/// The process exit code of a run that ended with `status`.
int exit_code(RunStatus status);

class Communicator;

struct TrainOptions {
  std::string run_dir;
  Communicator* comm = nullptr;              // world > 1: FSDP over these ranks (fsdp.h); rank 0
                                             // writes the run folder's files. none: one process
  int device_index = -1;                     // train.device cuda/auto without an index: this GPU
                                             // (the launcher's local rank); -1: GPU 0
  bool resume = false;                       // continue from the newest checkpoint of run_dir
  const std::atomic<bool>* stop = nullptr;   // raised by a signal handler: checkpoint and stop
  int64_t stop_after = 0;                    // > 0: checkpoint and stop (interrupted) after this many
                                             // steps of this invocation (time-sliced jobs)
  Logger* logger = nullptr;                  // console/file log; none: silent
};

struct TrainSummary {
  RunStatus status = RunStatus::Completed;
  int64_t steps = 0;                 // steps completed
  int64_t diverged_at = -1;          // the step whose loss or gradient was not finite
  double final_train_loss = 0.0;
  double final_val_loss = -1.0;      // -1: no validation split
  double val_perplexity = -1.0;
  int64_t spikes = 0;
  double max_grad_norm = 0.0;
  int64_t skipped_steps = 0;
  uint64_t tokens = 0;
  double wall_seconds = 0.0;
  std::string run_dir;
  // FSDP runs: the most bytes of parameters, gradients and optimizer state any rank holds
  // between steps (measured from the tensors), and the same for one unsharded process.
  int64_t rank_state_bytes = 0;
  int64_t unsharded_state_bytes = 0;
};

/// Runs (or resumes) training; throws on bad input (config, data, run folder).
TrainSummary train(const RunConfig& cfg, const TrainOptions& options);

}  // namespace normlab
