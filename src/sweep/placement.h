// Where a sweep's runs compute (private to src/sweep/): on GPUs, disjoint CUDA_VISIBLE_DEVICES
// slots, one run per slot; on the CPU, `jobs` runs sharing the cores; on Slurm, each run in its
// own allocation. Also the children's environment.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "normlab/sweep/sweep.h"

namespace normlab {

struct Placement {
  bool gpu = false;
  std::vector<std::string> slots;  // CUDA_VISIBLE_DEVICES of each concurrent run (GPU)
  int jobs = 1;
  std::map<std::string, std::string> env;  // set in every child
};

/// Local runs: GPU slots of spec.gpus_per_run devices (from CUDA_VISIBLE_DEVICES in
/// o.environment, else every CUDA device) when the base config trains on CUDA, else `jobs` CPU
/// runs with OMP_NUM_THREADS sharing the cores. Throws ConfigError when they cannot be placed.
Placement place_runs(const SweepSpec& spec, const SweepOptions& o);

/// Slurm runs: on GPUs when they ask for them (or the config says cuda); `jobs` (0: all of the
/// `points`) at a time in the queue.
Placement place_slurm_runs(const SweepSpec& spec, const SweepOptions& o, size_t points);

/// `base` (KEY=VALUE) with the keys of `set` replaced or added.
std::vector<std::string> environment_with(const std::vector<std::string>& base,
                                          const std::map<std::string, std::string>& set);

/// The value of KEY in a KEY=VALUE list; nullopt when absent.
std::optional<std::string> env_value(const std::vector<std::string>& env, const std::string& key);

}  // namespace normlab
