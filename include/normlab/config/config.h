// RunConfig: the whole configuration of a run, as plain structs with their defaults. YAML
// reaches it only through config_io.h; each component is handed just its own section.
// Each key's meaning is written once, in the schema of src/config/config_io.cpp (one visit()
// per section: key, field, doc), which `normlab config --reference` prints as the table of
// docs/config.md (a test keeps the two equal); the fields here carry no second copy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "normlab/config/enums.h"
#include "normlab/data/source.h"
#include "normlab/nn/model_config.h"

namespace normlab {

struct DataConfig {
  std::vector<DataSource> train;  // one source, or a mixture drawn by weight
  std::vector<DataSource> val;    // at most one source
  std::string tokenizer;
  int64_t seq_len = 2048;
};

struct OptimizerConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  bool decay_embeddings = true;
  double grad_clip = 1.0;
  bool fused = true;
};

/// Whether parameter `name` with `dim` dimensions is in the weight-decay group: matrices
/// decay, vectors (norm gains, SiameseNorm's c1, biases) never do, and the embedding and LM
/// head only with decay_embeddings. The optimizer and the FSDP layer both group by it.
bool decays(const std::string& name, int64_t dim, const OptimizerConfig& cfg);

struct SchedulerConfig {
  ScheduleKind kind = ScheduleKind::Cosine;
  int64_t warmup_steps = 2000;
  double final_lr_fraction = 0.1;
  double decay_fraction = 0.2;
};

struct TrainConfig {
  int64_t steps = 1000;
  int64_t global_batch = 512;
  int64_t micro_batch = 8;
  uint64_t seed = 0;
  std::string device = "auto";
  Precision precision = Precision::Auto;
  double z_loss = 0.0;
  bool skip_nonfinite = false;
  int64_t spike_window = 128;
  double spike_sigma = 6.0;
  ActivationCheckpointing activation_checkpointing = ActivationCheckpointing::None;
  int64_t selective_every = 2;
  int64_t loss_chunk_rows = 0;
};

struct EvalConfig {
  int64_t every = 100;
  bool at_start = false;
  int64_t batches = 0;
  int64_t micro_batch = 0;
  std::string tasks;
};

struct DiagnosticsConfig {
  int64_t every = 0;
  int64_t batch = 4;
  int64_t top_k = 4;
  bool pruning = false;
};

struct CheckpointConfig {
  int64_t every = 500;
  int64_t keep = 2;
  bool at_end = true;
};

struct LoggingConfig {
  int64_t every = 10;
  std::string level = "info";
  bool tensorboard = false;
  double peak_tflops = 0.0;  // MFU's denominator; 0: by the GPU's name (eval/mfu.h)
  int64_t mfu_warmup = 3;    // steps left out of the MFU window
};

struct DistributedConfig {
  CommBackend backend = CommBackend::Auto;
  int64_t timeout_seconds = 600;
  bool reshard_after_forward = true;
  bool prefetch = true;
  bool force_fsdp = false;
  Precision param_dtype = Precision::Auto;
  Precision reduce_dtype = Precision::Fp32;
  GradientReduce reduce = GradientReduce::PerMicroStep;
  bool overlap_reduce = true;
  int64_t shard_size = 0;  // ranks per shard group (hybrid sharding); 0: all ranks
  // Parameters gathered and reduced in fp32 whatever param_dtype and reduce_dtype say: a
  // comma-separated list of norms, scheme, embeddings; or none.
  std::string keep_fp32 = "norms,scheme,embeddings";
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
/// ConfigError naming the key.
void validate(const RunConfig& cfg);

}  // namespace normlab
