// RunConfig: the whole configuration of a run, as plain structs with their defaults. YAML
// reaches it only through config_io.h; each component is handed just its own section.
// Every key, its default and its meaning are listed in docs/config.md (generated from the
// schema in src/config_io.cpp and checked by a test).
#pragma once

#include <cstdint>
#include <string>

#include "normlab/model_config.h"
#include "normlab/name_table.h"

namespace normlab {

enum class ScheduleKind { Cosine, Linear, Wsd, Constant };
enum class Precision { Auto, Bf16, Fp32 };
enum class CommBackend { Auto, Mpi, Nccl };
enum class Recompute { None, Block, Selective };

// clang-format off
template <> struct EnumNames<ScheduleKind> {
  static constexpr NameRow<ScheduleKind> rows[] = {
    {ScheduleKind::Cosine, "cosine"}, {ScheduleKind::Linear, "linear"},
    {ScheduleKind::Wsd, "wsd"}, {ScheduleKind::Constant, "constant"}};
};
template <> struct EnumNames<Precision> {
  static constexpr NameRow<Precision> rows[] = {
    {Precision::Auto, "auto"}, {Precision::Bf16, "bf16"}, {Precision::Fp32, "fp32"}};
};
template <> struct EnumNames<Recompute> {
  static constexpr NameRow<Recompute> rows[] = {
    {Recompute::None, "none"}, {Recompute::Block, "block"}, {Recompute::Selective, "selective"}};
};
template <> struct EnumNames<CommBackend> {
  static constexpr NameRow<CommBackend> rows[] = {
    {CommBackend::Auto, "auto"}, {CommBackend::Mpi, "mpi"}, {CommBackend::Nccl, "nccl"}};
};
// clang-format on

struct DataConfig {
  std::string train;            // folder of training token shards (normlab data prepare)
  std::string val;              // folder of validation shards; empty: the train folder's val split
  std::string tokenizer;        // SentencePiece model; its vocabulary must fit model.vocab_size
  int64_t seq_len = 2048;       // tokens per sample (the model sees seq_len, predicts seq_len)
};

struct OptimizerConfig {
  double lr = 1e-3;             // peak learning rate
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;    // decoupled (AdamW); never on norm gains, c1 or biases
  bool decay_embeddings = true; // whether embedding and head matrices get weight decay
  double grad_clip = 1.0;       // global gradient-norm clip; 0 disables
  bool fused = true;            // at::_fused_adamw_ (one kernel over all tensors); false: the reference loop
};

struct SchedulerConfig {
  ScheduleKind kind = ScheduleKind::Cosine;
  int64_t warmup_steps = 2000;     // linear warm-up from 0 to the peak
  double final_lr_fraction = 0.1;  // lr at the last step, as a fraction of the peak
  double decay_fraction = 0.2;     // wsd: the last fraction of steps that decays
};

struct TrainConfig {
  int64_t steps = 1000;            // optimizer steps
  int64_t global_batch = 512;      // sequences per optimizer step, over all ranks
  int64_t micro_batch = 8;         // sequences per forward/backward on one rank
  uint64_t seed = 0;
  std::string device = "auto";     // auto (cuda if available), cpu, cuda, cuda:N
  Precision precision = Precision::Auto;  // auto: bf16 autocast on CUDA, fp32 on CPU
  double z_loss = 0.0;             // weight of mean(logsumexp(logits)^2)
  bool skip_nonfinite = false;     // skip steps with a non-finite loss or gradient instead of stopping
  int64_t spike_window = 128;      // loss-spike detector: rolling window of steps
  double spike_sigma = 6.0;        // a spike: loss above mean + sigma * std of the window
  Recompute activation_checkpointing = Recompute::None;  // block: keep block inputs, recompute inside
  int64_t selective_every = 2;     // selective: checkpoint blocks 0, k, 2k, ... (k = this)
  int64_t loss_chunk_rows = 0;     // > 0: the loss in chunks of this many rows, never the whole logits (loss.h)
};

struct EvalConfig {
  int64_t every = 100;             // evaluate every N steps (and at the end); 0: only at the end
  int64_t batches = 0;             // validation batches per evaluation; 0: the whole split
  int64_t micro_batch = 0;         // sequences per validation batch; 0: train.micro_batch
  std::string tasks;               // multiple-choice task files (tasks.h), comma-separated
};

struct DiagnosticsConfig {
  int64_t every = 0;               // run the diagnostics (diagnostics.h) every N steps; 0: off
  int64_t batch = 4;               // sequences of the fixed batch (the first of the validation split)
  int64_t top_k = 4;               // massive activations kept per layer and stream
  bool pruning = false;            // also the loss with each block skipped (n_layers more forward passes)
};

struct CheckpointConfig {
  int64_t every = 500;             // save every N steps (and at the end); 0: only at the end
  int64_t keep = 2;                // keep the last K checkpoints
  bool at_end = true;              // also save after the last step (benchmarks turn it off)
};

struct LoggingConfig {
  int64_t every = 10;              // console progress line every N steps
  std::string level = "info";      // debug, info, warn, error
};

struct DistributedConfig {
  CommBackend backend = CommBackend::Auto;  // auto: nccl on CUDA, mpi on CPU (docs/distributed.md)
  int64_t timeout_seconds = 600;            // a collective waiting longer ends the run with an error
  bool reshard_after_forward = true;        // FSDP: free each block's gathered weights after its forward
  bool prefetch = true;                     // FSDP: start the next block's all-gather before this one runs
  bool force_fsdp = false;                  // FSDP (and on CUDA the NCCL engine) even in one process
  Precision param_dtype = Precision::Auto;  // FSDP all-gather dtype: auto = bf16 when training in bf16, else fp32
  Precision reduce_dtype = Precision::Fp32; // FSDP gradient reduce-scatter dtype: auto = param_dtype
};

struct RunConfig {
  ModelConfig model;
  DataConfig data;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  TrainConfig train;
  EvalConfig eval;
  DiagnosticsConfig diagnostics;
  CheckpointConfig checkpoint;
  LoggingConfig logging;
  DistributedConfig distributed;
};

/// Cross-field checks of a whole run (each section's own, then their combinations); throws
/// std::invalid_argument naming the key.
void validate(const RunConfig& cfg);

}  // namespace normlab
