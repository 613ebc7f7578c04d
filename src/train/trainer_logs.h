// The trainer's outputs besides checkpoints: metrics.jsonl (one line per step),
// diagnostics.jsonl, the TensorBoard events, the log's description of the run, its progress,
// evaluation and FSDP memory lines, the MFU, and summary.json. Only rank 0 writes the run
// folder's files; a failed write (a full disk) is reported once and the run goes on. Private
// to src/train/.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "normlab/eval/diagnostics.h"
#include "normlab/eval/mfu.h"
#include "normlab/train/run_summary.h"
#include "normlab/util/tensorboard.h"
#include "train/trainer_context.h"
#include "train/trainer_state.h"

namespace normlab {

class RunLogs {
 public:
  /// Opens metrics.jsonl, diagnostics.jsonl (diagnostics.every) and the TensorBoard events
  /// (logging.tensorboard) for appending after `step`: the lines and events of the steps after
  /// it (a resumed run's future) are dropped. The writes below come after it.
  void open(const RunContext& ctx, int64_t step);

  /// The run's shape in the log (model, parameters, device and precision, steps, micro-steps,
  /// FSDP's dtypes) and the precision's reason; starts summary.json's fields.
  void describe_run(const RunContext& ctx, int64_t micro_steps, const std::string& fsdp_dtypes);
  /// What the steps run on: the attention kernel LibTorch dispatches to for this shape and, on
  /// CUDA, the matmul rate this GPU reaches now (the second MFU denominator).
  void describe_kernels(const RunContext& ctx);

  void write_metrics(const RunContext& ctx, const nlohmann::json& line);
  void write_diagnostics(const RunContext& ctx, const DiagnosticsReport& d);
  /// A step's time, and every logging.every steps the progress line.
  void log_step(const RunContext& ctx, const StepMetrics& m);
  /// Under FSDP, once at rest after the first step: the state each rank holds, measured.
  void log_fsdp_memory(const RunContext& ctx, const RunState& state);
  /// An evaluation after `step` into the log and the metrics line; its task accuracies are
  /// the summary's.
  void record_evaluation(const RunContext& ctx, int64_t step, const EvalReport& e,
                         nlohmann::json& line);
  /// Keeps the newest multiple-choice accuracies for the summary.
  void note_tasks(const EvalReport& e);
  void note_divergence(int64_t step) { sum_.diverged_at = step; }
  double tokens_per_step() const { return tokens_per_step_; }
  /// summary.json (rank 0) for a run that ended with `status`, from the state's counters.
  RunSummary finish(const RunContext& ctx, RunStatus status, const RunState& state);

 private:
  void write_events(const RunContext& ctx, int64_t step, const std::vector<Scalar>& scalars);
  void log_mfu(const RunContext& ctx);

  std::string metrics_path_;
  std::ofstream metrics_;
  bool metrics_failed_ = false;  // a failed write (full disk) is reported once
  std::ofstream diagnostics_;
  std::unique_ptr<EventWriter> events_;  // logging.tensorboard: RUN_DIR/tensorboard/
  bool events_failed_ = false;
  double flops_token_ = 0.0, tokens_per_step_ = 0.0, matmul_flops_ = 0.0;
  std::string gpu_name_;           // CUDA: the device's name
  std::optional<GpuPeak> peak_;    // CUDA: MFU's denominator (none: not in the table)
  std::vector<double> step_secs_;  // this invocation's steps, for the steady-state MFU
  RunSummary sum_;
  std::map<std::string, TaskScore> final_tasks_;  // the newest multiple-choice accuracies
  double window_seconds_ = 0.0;                   // since the last progress line
  int64_t window_steps_ = 0;
};

}  // namespace normlab
