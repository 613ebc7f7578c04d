// The trainer: `normlab train` runs it on a resolved RunConfig, in one process or on every
// rank of a job.
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
#include <functional>
#include <map>
#include <string>

#include <memory>

#include "normlab/config/config.h"
#include "normlab/train/run_summary.h"
#include "normlab/util/log.h"

namespace normlab {

class Communicator;
class WriteFault;
class ForwardHooks;

struct TrainOptions {
  std::string run_dir;
  Communicator* comm = nullptr;  // world > 1: FSDP over these ranks (fsdp.h); rank 0
                                 // writes the run folder's files. none: one process
  int device_index = -1;         // train.device cuda/auto without an index: this GPU
                                 // (the launcher's local rank); -1: GPU 0
  bool resume = false;           // continue from the newest checkpoint of run_dir
  std::string init_from;         // initial weights: a .safetensors file or a folder holding a
                                 // model.safetensors (checkpoint step, export); strict names. Not
                                 // used when resuming from a checkpoint
  const std::atomic<bool>* stop = nullptr;  // raised by a signal handler: checkpoint and stop
  int64_t stop_after = 0;      // > 0: checkpoint and stop (interrupted) after this many
                               // steps of this invocation (time-sliced jobs)
  Logger* logger = nullptr;    // console/file log; none: silent
  std::string onednn_max_isa;  // the oneDNN ISA limit this process runs under (the CLI passes
                               // ONEDNN_MAX_CPU_ISA): train.precision = auto follows it
  // Test-only hooks (docs/reliability.md, "Fault injection"; the CLI sets them from
  // NORMLAB_FAULT): every checkpoint file is written through `checkpoint_fault`, and
  // `after_step` is called with the step just completed, after its metrics line and before the
  // stop flag is read (a SIGTERM raised there stops the run after this step).
  // `forward_hooks`, when set, see each block's forward (a LibTorch error forced in one block)
  // unless activation checkpointing or FSDP takes the model's hooks.
  WriteFault* checkpoint_fault = nullptr;
  std::function<void(int64_t step)> after_step;
  ForwardHooks* forward_hooks = nullptr;
};

/// One optimizer step's numbers (Trainer::step).
struct StepMetrics {
  int64_t step = 0;  // the step just completed (1-based)
  double lr = 0.0;
  double loss = 0.0;  // mean cross-entropy over the global batch
  // MoE models (-1 for dense ones), over the global batch: the load-balancing loss and router
  // z-loss (unweighted, means over the MoE layers), the mean router entropy (nats), the largest
  // share of one layer's assignments that one expert got (1/E when balanced), and how many
  // (layer, expert) pairs got no token.
  double moe_lb = -1.0;
  double moe_router_z = -1.0;
  double moe_router_entropy = -1.0;
  double moe_max_expert_share = -1.0;
  int64_t moe_idle_experts = -1;
  double grad_norm = 0.0;  // before clipping
  bool finite = true;      // loss and gradient norm finite
  bool skipped = false;    // not finite, and train.skip_nonfinite skipped the update
  bool spike = false;
  double seconds = 0.0;             // the step's wall time (synchronised on CUDA)
  double comm_wait_seconds = -1.0;  // FSDP: waited for gathers and reductions (-1: no FSDP)
};

/// What an evaluation measured (Trainer::evaluate).
struct EvalReport {
  double val_loss = -1.0;  // -1: no validation split
  double perplexity = -1.0;
  double bits_per_byte = -1.0;  // -1: no tokenizer to count bytes
  int64_t tokens = 0;
  std::map<std::string, TaskScore> tasks;
};

/// A training run, in the spirit of torchtitan's Trainer: construction builds the run (run
/// folder and its lock, device, data, model, FSDP when sharded, optimizer, and the resumed
/// state when options.resume); run() steps until train.steps, divergence or the stop flag;
/// the steps of run() are public for callers that drive the loop themselves.
///
///   Trainer t(cfg, options);
///   RunSummary s = t.run();            // or: while (...) t.step(); t.save(); t.finish(...)
class Trainer {
 public:
  /// Throws on bad input (config, data, run folder, a checkpoint that cannot be resumed).
  Trainer(const RunConfig& cfg, const TrainOptions& options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// The whole loop from the current step; writes metrics, evaluations, diagnostics,
  /// checkpoints and, at the end, summary.json.
  RunSummary run();
  /// One optimizer step: micro-batches with gradient accumulation, clipping, the divergence
  /// guard and AdamW.
  StepMetrics step();
  /// Validation loss (over eval.batches) and the multiple-choice tasks, now.
  EvalReport evaluate();
  /// A checkpoint of the current step (sharded under FSDP); returns checkpoint_save's
  /// description of it (its folder and what was pruned).
  std::string save();
  /// Writes summary.json for a run that ended with `status` and returns it.
  RunSummary finish(RunStatus status);
  /// Steps completed so far (resumed ones included).
  int64_t steps_done() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Trainer(cfg, options).run().
RunSummary train(const RunConfig& cfg, const TrainOptions& options);

}  // namespace normlab
