// What a training run is given and decides once, before any tensor exists: the resolved config
// and options, the communicator and this rank's place in it, the device and the precision.
// Read-only once built: the trainer's parts (trainer_checkpoints.h, trainer_data.h,
// trainer_state.h, trainer_logs.h) take it by const reference. Private to src/train/.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>

#include "normlab/config/config.h"
#include "normlab/distributed/communicator.h"
#include "normlab/train/precision.h"
#include "normlab/train/trainer.h"

namespace normlab {

/// The precision that run folder `run_dir`'s checkpoints record: the newest checkpoint whose
/// state.json reads and records one ("" when none does). Every checkpoint of a run records the
/// same one (RunState writes the run's precision into each).
std::string run_precision(const std::string& run_dir);

class RunContext {
 public:
  /// Checks what needs no tensor (the diagnostics need one process, distributed.shard_size
  /// divides the ranks, the model fits the device) and resolves the device and the precision.
  /// Throws ConfigError naming the key.
  RunContext(const RunConfig& config, const TrainOptions& options);
  RunContext(const RunContext&) = delete;
  RunContext& operator=(const RunContext&) = delete;

  /// A line in the run's log (none when the options give no logger).
  void info(const std::string& m) const {
    if (log) log->info(m);
  }

 private:
  SingleProcess single_;  // the communicator when the options give none

  // train.precision resolved: on resume under auto, the precision the run's checkpoints record;
  // else choose_precision, with this model's bf16 and fp32 GEMMs timed (or read from the
  // cache, precision_probe.h) where bf16 is native on the CPU, by rank 0 for all ranks.
  PrecisionChoice decide_precision();

 public:
  const RunConfig cfg;
  const TrainOptions o;
  Logger* const log;
  Communicator& comm;
  const int64_t rank, world;
  const bool sharded;  // FSDP: several ranks, or distributed.force_fsdp
  const bool lead;     // rank 0: writes the run folder's files
  torch::Device device{torch::kCPU};
  CpuClass cpu;               // the CPU as the kernels see it (under TrainOptions::onednn_max_isa)
  PrecisionChoice precision;  // train.precision resolved for the device (the log says why)
  bool bf16 = false;          // bf16 autocast on the device (CPU or CUDA), fp32 master weights
  bool fp64 = false;          // weights, state and activations in float64
};

}  // namespace normlab
