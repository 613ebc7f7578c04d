// summary.json, the record of how a run ended: written by the trainer when a run stops, read
// by the sweep (a point's state, the report's tables) and by anyone scripting around runs.
// This header is the format's one owner: the fields, their JSON names and their absent values.
//
//   status, exit_code    completed (0), diverged (3) or interrupted (4)
//   steps, steps_planned steps done and train.steps
//   final_train_loss ... null when not finite or not measured (no validation split)
//   tokens, wall_seconds, tokens_per_s   tokens trained on over the training time
//   mfu, mfu_spread      CUDA only, over the steady-state steps (logging.mfu_warmup dropped):
//                        model FLOP/s over the GPU's peak dense bf16 rate (peak_flops, by the
//                        GPU's name or logging.peak_tflops; absent when neither), and the
//                        standard deviation of the per-step MFU
//   mfu_measured         the same over the matmul rate measured at start
//   mfu_steps, gpu       the window's steps and the GPU's name
//   precision            what the run trained in: "bf16", "fp32" or "fp64"
//   precision_timing     where train.precision = auto (or bf16) measured it on a CPU with native
//                        bf16: {fp32_seconds, bf16_seconds, rows, source} (precision_probe.h)
//   tasks                the newest multiple-choice accuracies, by task name
//   world_size, ...      FSDP runs only
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "normlab/util/name_table.h"

namespace normlab {

enum class RunStatus { Completed, Diverged, Interrupted };

// clang-format off
template <> struct EnumNames<RunStatus> {
  static constexpr NameRow<RunStatus> rows[] = {
    {RunStatus::Completed, "completed"}, {RunStatus::Diverged, "diverged"},
    {RunStatus::Interrupted, "interrupted"}};
};
// clang-format on

/// The process exit code of a run that ended with `status`: 0, 3 or 4.
int exit_code(RunStatus status);

struct TaskScore {
  double acc = 0.0;
  double acc_norm = 0.0;
  int64_t items = 0;
};

struct RunSummary {
  RunStatus status = RunStatus::Completed;
  std::string scheme;
  int64_t steps = 0;          // steps completed
  int64_t steps_planned = 0;  // train.steps
  int64_t diverged_at = -1;   // the step whose loss or gradient was not finite; -1: none
  double final_train_loss = 0.0;
  double final_val_loss = -1.0;  // -1: no validation split
  double val_perplexity = -1.0;
  int64_t spikes = 0;
  double max_grad_norm = 0.0;
  int64_t skipped_steps = 0;
  uint64_t tokens = 0;
  double wall_seconds = 0.0;
  std::string attention_backend;  // the SDPA kernel the steps ran on (attention.h)
  std::string precision;          // "bf16", "fp32" or "fp64" ("" in older files)
  std::optional<double> precision_fp32_seconds, precision_bf16_seconds;  // the measurement
  int64_t precision_rows = 0;                                            // its rows
  std::string precision_source;                                          // "measured" or "cached"
  int64_t parameters = 0;
  double peak_memory_bytes = 0.0;
  std::optional<double> mfu;           // CUDA: model FLOP/s over the peak, steady steps
  std::optional<double> mfu_spread;    // CUDA: the per-step MFU's standard deviation
  std::optional<double> peak_flops;    // CUDA: that peak (absent: the GPU is not in the table)
  std::optional<double> mfu_measured;  // CUDA: over the matmul rate measured at start
  int64_t mfu_steps = 0;               // CUDA: the steps of the MFU window
  std::string gpu;                     // CUDA: the GPU's name
  std::optional<double> matmul_flops;  // CUDA: that rate
  std::map<std::string, TaskScore> tasks;
  // FSDP runs (world_size > 0): the most bytes of parameters, gradients and optimizer state any
  // rank holds between steps (measured from the tensors), and the same for one unsharded process.
  int64_t world_size = 0;
  int64_t rank_state_bytes = 0;
  int64_t unsharded_state_bytes = 0;
  std::string run_dir;  // not in the file: where it was read from or written to

  /// Tokens per second of training time; 0 before any step.
  double tokens_per_s() const;
};

/// The text of summary.json.
std::string run_summary_json(const RunSummary& s);
/// Parses summary.json's text; throws std::invalid_argument naming `path` and the field when
/// the text is not a summary (not JSON, no known status, a field of the wrong type).
RunSummary run_summary_parse(const std::string& text, const std::string& path);
/// RUN_DIR/summary.json, written atomically.
void run_summary_write(const std::string& run_dir, const RunSummary& s);
/// RUN_DIR/summary.json when it exists and parses; nullopt otherwise (no summary yet, or a
/// file a crash left unreadable: both count as no summary).
std::optional<RunSummary> run_summary_read(const std::string& run_dir);

}  // namespace normlab
