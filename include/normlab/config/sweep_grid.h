// The grid of a learning-rate sweep, as plain data: the spec a user states (CLI flags or a
// configs/sweeps/ file), learning-rate lists and ranges with their labels, and the points
// (scheme x lr x seed) with their overrides. Torch-free: the config loader reads sweep files
// into it (config_io.h), and the sweep runner (sweep/sweep.h) runs its points.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "normlab/nn/model_config.h"

namespace normlab {

/// Early stopping of a sweep's points (sweep/asha.h). Off unless `asha`.
struct EarlyStopSpec {
  bool asha = false;
  int64_t min_steps = 0;  // the first rung; 0 = the base config's eval.every
  int64_t reduction = 3;  // eta: each rung keeps the best 1/eta of the points that reach it
};

/// A sweep as the user states it (CLI flags or a configs/sweeps/ file). Empty axes take the
/// base config's value.
struct SweepSpec {
  std::string config;                  // base run config (YAML)
  std::vector<std::string> overrides;  // section.key=value for every point, before the grid's keys
  std::vector<Scheme> schemes;
  std::vector<double> lrs;
  std::vector<uint64_t> seeds;
  int jobs = 0;          // concurrent runs; 0 = 1 on CPU, one per GPU slot on GPUs
  int gpus_per_run = 0;  // 0 = CPU runs (or 1 when CUDA devices exist); K = K devices per run
  EarlyStopSpec early_stop;
};

/// Learning rates from "4e-4,1e-3,2e-3" or the log-spaced range "1e-4:1e-2:5" (5 values from
/// 1e-4 to 1e-2, each rounded to 3 significant digits). Throws std::invalid_argument.
std::vector<double> parse_lr_list(const std::string& text);

/// "3.16e-3": the short form used in point names and table headers (3 significant digits).
std::string lr_label(double lr);

struct SweepPoint {
  Scheme scheme;
  double lr;
  uint64_t seed;
  std::string name;                    // "siamese_hybrid-lr1e-3-s0": the folder under runs/
  std::vector<std::string> overrides;  // spec overrides + model.scheme, optimizer.lr, train.seed
};

/// The grid in scheme-major order; each point's config is validated (config_load) so that a
/// bad spec fails before anything runs. Throws ConfigError / std::invalid_argument.
std::vector<SweepPoint> sweep_points(const SweepSpec& spec);

}  // namespace normlab
