// Trainer::Impl, shared by the trainer's sources (private to src/train/). Construction builds
// the run (trainer_setup.cpp), the run's checkpoints are saved and resumed in
// trainer_resume.cpp, its logs (metrics.jsonl, diagnostics.jsonl, TensorBoard events, the
// progress line) are written in trainer_logs.cpp, and trainer.cpp holds the loop:
//   step()       micro-batches with gradient accumulation, clipping, the divergence guard, AdamW
//   evaluate()   validation loss and multiple-choice tasks
//   diagnose()   the paper's diagnostics on a fixed batch (diagnostics.every)
//   save()       a checkpoint (sharded under FSDP)
//   finish()     summary.json
// and run() strings them together with the metrics, the progress line and the stop flag.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "normlab/data/loader.h"
#include "normlab/data/tokenizer.h"
#include "normlab/distributed/communicator.h"
#include "normlab/distributed/fsdp.h"
#include "normlab/eval/diagnostics.h"
#include "normlab/eval/mfu.h"
#include "normlab/eval/tasks.h"
#include "normlab/nn/activation_checkpointing.h"
#include "normlab/nn/model.h"
#include "normlab/train/checkpoint.h"
#include "normlab/train/optimizer.h"
#include "normlab/train/precision.h"
#include "normlab/train/stability.h"
#include "normlab/train/trainer.h"
#include "normlab/util/file_io.h"
#include "normlab/util/tensorboard.h"

namespace normlab {

struct Trainer::Impl {
  using Clock = std::chrono::steady_clock;
  static double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }

  Impl(const RunConfig& config, const TrainOptions& options);

  void open_run_folder();
  void load_data();
  void describe_data();
  void note_data_epochs(int64_t step);
  void load_validation();
  void load_tasks();
  void build_model();
  void resume();
  void restore(const Checkpoint& ck);
  void open_logs();
  void describe();

  StepMetrics step();
  double accumulate(int64_t s, StepMetrics& m);
  void log_routing(const std::vector<std::vector<RouterStats>>& passes, double scale,
                   StepMetrics& m);
  EvalReport evaluate();
  void add_evaluation(int64_t step, nlohmann::json& line);
  void diagnose(int64_t completed, nlohmann::json& line);
  std::string save();
  RunSummary finish(RunStatus status);
  RunSummary run();
  void log_progress(const StepMetrics& m);
  void log_fsdp_memory();
  void write_metrics(const nlohmann::json& line);
  void write_diagnostics(const DiagnosticsReport& d);  // diagnostics.jsonl and the events
  void write_events(int64_t step, const std::vector<Scalar>& scalars);
  void info(const std::string& m) const {
    if (log) log->info(m);
  }

  // ---- the run ----
  RunConfig cfg;
  TrainOptions o;
  Logger* log;
  SingleProcess single;
  Communicator& comm;
  int64_t rank, world;
  bool sharded, lead;
  std::unique_ptr<FileLock> run_lock;
  std::optional<std::string> latest;  // the newest checkpoint in the run folder
  torch::Device device{torch::kCPU};
  PrecisionChoice precision;  // train.precision resolved for the device (the log says why)
  bool bf16 = false;          // bf16 autocast on the device (CPU or CUDA), fp32 master weights
  bool fp64 = false;          // weights, state and activations in float64
  // ---- data ----
  std::shared_ptr<TokenDataset> train_data;
  std::unique_ptr<TrainLoader> loader;
  std::unique_ptr<ValLoader> val;
  std::vector<int64_t> data_epochs;  // each training source's epoch at the last step begun
  Batch diag_batch;  // the fixed diagnostics batch: the first validation (else training) sequences
  std::unique_ptr<Tokenizer> tokenizer;  // per-byte numbers and tasks need it
  std::vector<int32_t> token_bytes;
  std::vector<std::pair<std::string, std::vector<McItem>>> tasks;
  // ---- model and optimizer ----
  DecoderLM model{nullptr};
  std::vector<torch::Tensor> params;
  int64_t n_params = 0;
  int64_t activation_checkpointing_every =
      0;  // activation checkpointing of every k-th block; 0 none
  std::unique_ptr<ActivationCheckpointedBlocks> activation_checkpointed_blocks;  // single process
  std::unique_ptr<Fsdp> fsdp;
  std::unique_ptr<AdamW> opt;
  std::string fsdp_dtypes;  // for the log
  SpikeDetector spikes;
  TrainState st;
  std::string config_yaml;
  // ---- outputs ----
  std::string metrics_path;
  std::ofstream metrics;
  bool metrics_failed = false;  // a failed write (full disk) is reported once
  std::ofstream diagnostics;
  std::unique_ptr<EventWriter> events;  // logging.tensorboard: RUN_DIR/tensorboard/
  bool events_failed = false;
  double flops_token = 0.0, tokens_per_step = 0.0, matmul_flops = 0.0;
  std::string gpu_name;           // CUDA: the device's name
  std::optional<GpuPeak> peak;    // CUDA: MFU's denominator (none: not in the table)
  std::vector<double> step_secs;  // this invocation's steps, for the steady-state MFU
  void log_mfu();                 // the steady-state MFU at the end, into the log and summary
  std::string attn_backend;
  RunSummary sum;
  std::map<std::string, TaskScore> final_tasks;  // the newest multiple-choice accuracies
  double window_seconds = 0.0;                   // since the last progress line
  int64_t window_steps = 0;
};

}  // namespace normlab
