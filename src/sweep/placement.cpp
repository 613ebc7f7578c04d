// Where a sweep's runs compute (placement.h), and gpu_slots (sweep.h).
#include "sweep/placement.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "normlab/config/config_io.h"
#include "normlab/util/device.h"

namespace normlab {

std::vector<std::string> environment_with(const std::vector<std::string>& base,
                                          const std::map<std::string, std::string>& set) {
  std::vector<std::string> env;
  for (const auto& kv : base)
    if (!set.count(kv.substr(0, kv.find('=')))) env.push_back(kv);
  for (const auto& [k, v] : set) env.push_back(k + "=" + v);
  return env;
}

// The value of KEY in a KEY=VALUE list; nullopt when absent.
std::optional<std::string> env_value(const std::vector<std::string>& env, const std::string& key) {
  for (const auto& kv : env)
    if (kv.compare(0, key.size() + 1, key + "=") == 0) return kv.substr(key.size() + 1);
  return std::nullopt;
}

std::vector<std::string> gpu_slots(const std::vector<std::string>& devices, int per_run) {
  if (per_run < 1) throw std::invalid_argument("gpu_slots: per_run must be at least 1");
  std::vector<std::string> slots;
  for (size_t i = 0; i + static_cast<size_t>(per_run) <= devices.size();
       i += static_cast<size_t>(per_run)) {
    std::string s;
    for (int k = 0; k < per_run; ++k) s += (k ? "," : "") + devices[i + static_cast<size_t>(k)];
    slots.push_back(s);
  }
  return slots;
}

// On Slurm: each run in its own allocation, on GPUs when it asks for them (or the config says
// cuda); `jobs` (0: all) at a time in the queue.
Placement place_slurm_runs(const SweepSpec& spec, const SweepOptions& o, size_t points) {
  const RunConfig base = config_load(spec.config, spec.overrides);
  if (spec.gpus_per_run > 0)
    throw ConfigError(
        "sweep: --gpus-per-run is for local runs; on Slurm give --nodes-per-run "
        "and --gpus-per-node");
  Placement pl;
  pl.gpu =
      base.train.device == "cuda" || (base.train.device == "auto" && o.slurm.gpus_per_node > 0);
  if (pl.gpu && o.slurm.gpus_per_node <= 0)
    throw ConfigError("sweep: train.device " + base.train.device +
                      " on Slurm needs --gpus-per-node G (G ranks, one per GPU, on each node)");
  pl.jobs = spec.jobs > 0 ? spec.jobs : static_cast<int>(points);
  return pl;
}

Placement place_runs(const SweepSpec& spec, const SweepOptions& o) {
  const RunConfig base = config_load(spec.config, spec.overrides);
  Placement pl;
  pl.gpu = base.train.device != "cpu" && (base.train.device != "auto" || cuda_available());
  pl.jobs = spec.jobs;
  if (pl.gpu) {
    const int per_run = spec.gpus_per_run > 0 ? spec.gpus_per_run : 1;
    std::vector<std::string> devices;
    if (const auto v = env_value(o.environment, "CUDA_VISIBLE_DEVICES"); v && !v->empty()) {
      std::stringstream ss(*v);
      for (std::string d; std::getline(ss, d, ',');) devices.push_back(d);
    } else {
      for (const auto& d : cuda_devices()) devices.push_back(std::to_string(d.index));
    }
    pl.slots = gpu_slots(devices, per_run);
    if (pl.slots.empty())
      throw ConfigError("sweep: " + std::to_string(devices.size()) + " visible CUDA device(s), " +
                        std::to_string(per_run) + " needed per run");
    const int n = static_cast<int>(pl.slots.size());
    if (pl.jobs == 0 || pl.jobs > n) pl.jobs = n;
    return pl;
  }
  if (spec.gpus_per_run > 0)
    throw ConfigError("sweep: --gpus-per-run " + std::to_string(spec.gpus_per_run) +
                      " but the runs are on the CPU (train.device " + base.train.device +
                      (cuda_available() ? ")" : ", no CUDA device)"));
  if (pl.jobs == 0) pl.jobs = 1;
  if (pl.jobs > 1 && !env_value(o.environment, "OMP_NUM_THREADS")) {
    // Share the cores between the concurrent runs instead of oversubscribing them.
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    pl.env["OMP_NUM_THREADS"] =
        std::to_string(std::max(1u, cores / static_cast<unsigned>(pl.jobs)));
  }
  return pl;
}

}  // namespace normlab
