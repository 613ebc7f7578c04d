// The trainer's run state: the model (wrapped by FSDP when sharded, with its activation
// checkpointing), the optimizer, the spike detector and the counters (TrainState) that a
// checkpoint saves and a resume restores. It takes optimizer steps on the data's batches,
// evaluates and runs the diagnostics. Private to src/train/.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "normlab/distributed/fsdp.h"
#include "normlab/eval/diagnostics.h"
#include "normlab/nn/activation_checkpointing.h"
#include "normlab/nn/model.h"
#include "normlab/train/checkpoint.h"
#include "normlab/train/optimizer.h"
#include "normlab/train/stability.h"
#include "train/trainer_context.h"
#include "train/trainer_data.h"

namespace normlab {

/// Seconds on the steady clock since `t0`: the time of a step, of the diagnostics.
double seconds_since(std::chrono::steady_clock::time_point t0);

class RunState {
 public:
  /// Builds the model from train.seed (the same weights on every rank), loads
  /// options.init_from unless `resuming`, checks that every rank runs the same thing (several
  /// processes), wraps it in FSDP when sharded and builds AdamW over what this rank holds.
  RunState(const RunContext& ctx, bool resuming);

  /// One optimizer step on the data's batches of the current step: micro-batches with
  /// gradient accumulation, clipping, the divergence guard, AdamW.
  StepMetrics step(const RunContext& ctx, TrainData& data);
  /// Validation loss (over eval.batches, over every rank) and the multiple-choice tasks.
  EvalReport evaluate(const RunContext& ctx, const TrainData& data);
  /// The paper's diagnostics on `batch` (without activation checkpointing), at the current
  /// step.
  DiagnosticsReport diagnose(const RunContext& ctx, const Batch& batch);
  /// Weights and optimizer state from a checkpoint: whole into one process, sliced onto FSDP
  /// ranks from a whole checkpoint, or this rank's own pieces from a sharded one.
  void restore(const RunContext& ctx, const Checkpoint& ck);
  /// The counters and the spike detector's window from a checkpoint.
  void restore_progress(const TrainState& st);
  /// Adds time spent outside the steps (the diagnostics) to the run's wall time.
  void add_wall_seconds(double s) { st_.wall_seconds += s; }

  /// The counters, with the spike detector's window (what a checkpoint saves).
  TrainState progress() const;
  int64_t steps_done() const { return st_.step; }
  uint64_t tokens_seen() const { return st_.tokens; }
  const SpikeDetector& spikes() const { return spikes_; }
  DecoderLM& model() { return model_; }
  const DecoderLM& model() const { return model_; }
  Fsdp* fsdp() const { return fsdp_.get(); }
  AdamW& optimizer() { return *opt_; }
  const AdamW& optimizer() const { return *opt_; }
  int64_t parameter_count() const { return n_params_; }
  /// Under FSDP, what travels in which dtype, for the log ("" in one process).
  const std::string& fsdp_dtypes() const { return fsdp_dtypes_; }

 private:
  double accumulate(const RunContext& ctx, TrainData& data, int64_t s, StepMetrics& m);
  void build_fsdp(const RunContext& ctx);
  void restore_hooks(const RunContext& ctx);

  DecoderLM model_{nullptr};
  std::vector<torch::Tensor> params_;
  int64_t n_params_ = 0;
  int64_t activation_checkpointing_every_ = 0;  // every k-th block; 0 none
  std::unique_ptr<ActivationCheckpointedBlocks> activation_checkpointed_blocks_;  // one process
  std::unique_ptr<Fsdp> fsdp_;
  std::unique_ptr<AdamW> opt_;
  std::string fsdp_dtypes_;
  SpikeDetector spikes_;
  TrainState st_;
  uint64_t tokens_per_step_ = 0;
};

}  // namespace normlab
