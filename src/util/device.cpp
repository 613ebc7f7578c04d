#include "normlab/util/device.h"
#include "normlab/util/error.h"

#include <ATen/cuda/CUDAContextLight.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <unistd.h>

#include <torch/cuda.h>
#include <torch/version.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <initializer_list>

namespace normlab {

std::string torch_version() { return TORCH_VERSION; }

bool cuda_available() { return torch::cuda::is_available(); }

torch::Device resolve_device(const std::string& name, int default_index) {
  torch::Device d(torch::kCPU);
  if (name == "auto") {
    d = cuda_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  } else {
    try {
      d = torch::Device(name);
    } catch (const c10::Error&) {
      throw ConfigError("train.device = " + name + ": not a device (auto, cpu, cuda, cuda:N)");
    }
    if (d.is_cuda() && !cuda_available())
      throw ConfigError("train.device = " + name + ": CUDA is not available");
  }
  if (d.is_cuda() && !d.has_index())
    d = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(std::max(default_index, 0)));
  return d;
}

namespace {

// "K1=v1, K2=v2" for those of `keys` present in `vars`; "K1, K2 unset" when none is.
std::string vars_named(const std::map<std::string, std::string>& vars,
                       std::initializer_list<const char*> keys) {
  std::string set, unset;
  for (const char* k : keys) {
    const auto it = vars.find(k);
    std::string& to = it != vars.end() ? set : unset;
    to += (to.empty() ? "" : ", ") + std::string(k) + (it != vars.end() ? "=" + it->second : "");
  }
  return set.empty() ? unset + " unset" : set;
}

}  // namespace

int choose_cuda_index(const GpuPlacement& p, int visible) {
  const std::string filters =
      vars_named(p.vars, {"CUDA_VISIBLE_DEVICES", "SLURM_GPUS_PER_TASK", "SLURM_STEP_GPUS"});
  const std::string ranks =
      vars_named(p.vars, {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"});
  if (visible <= 0)
    throw ConfigError("this rank's GPU: no CUDA device is visible to this process (" + filters +
                      ")");
  if (visible == 1) return 0;  // one device per rank: whatever the local rank says
  if (p.local_rank >= 0 && p.local_rank < visible) return p.local_rank;
  if (p.local_rank >= visible)
    throw ConfigError("this rank's GPU: local rank " + std::to_string(p.local_rank) + " (" + ranks +
                      ") but " + std::to_string(visible) + " CUDA devices are visible (" + filters +
                      "): start at most " + std::to_string(visible) +
                      " ranks per node, or give each rank one device (srun --gpus-per-task 1, "
                      "or CUDA_VISIBLE_DEVICES=<one id> per rank)");
  if (p.world > 1)
    throw ConfigError("this rank's GPU: " + std::to_string(visible) +
                      " CUDA devices are visible (" + filters +
                      ") and the launcher gave no local rank (" + ranks + ") to this rank of " +
                      std::to_string(p.world) +
                      ": set LOCAL_RANK, or give each rank one device (CUDA_VISIBLE_DEVICES=<one "
                      "id> per rank)");
  return 0;  // a single process: the first device
}

torch::Device resolve_device(const std::string& name, const GpuPlacement& placement) {
  const torch::Device d = resolve_device(name, -1);
  if (!d.is_cuda() || name.find(':') != std::string::npos) return d;  // cuda:N named
  return torch::Device(torch::kCUDA,
                       static_cast<c10::DeviceIndex>(choose_cuda_index(
                           placement, static_cast<int>(torch::cuda::device_count()))));
}

double device_memory_bytes(const torch::Device& device, bool peak) {
  if (device.is_cuda()) {
    const auto stats =
        c10::cuda::CUDACachingAllocator::getDeviceStats(device.index() < 0 ? 0 : device.index());
    const auto& s =
        stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
    return static_cast<double>(peak ? s.peak : s.current);
  }
  if (peak) {  // the resident set's high-water mark
    double kb = 0.0;
    if (FILE* f = std::fopen("/proc/self/status", "r")) {
      char line[256];
      while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "VmHWM: %lf kB", &kb) == 1) break;
      std::fclose(f);
    }
    return kb * 1024.0;
  }
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

double device_capacity_bytes(const torch::Device& device) {
  if (device.is_cuda()) {
    const cudaDeviceProp* p =
        at::cuda::getDeviceProperties(device.index() < 0 ? 0 : device.index());
    return static_cast<double>(p->totalGlobalMem);
  }
  return static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
         static_cast<double>(::sysconf(_SC_PAGESIZE));
}

std::vector<CudaDeviceInfo> cuda_devices() {
  std::vector<CudaDeviceInfo> out;
  if (!cuda_available()) return out;
  const auto n = static_cast<int>(torch::cuda::device_count());
  for (int i = 0; i < n; ++i) {
    const cudaDeviceProp* p = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(i));
    out.push_back({i, p->name, p->major, p->minor,
                   static_cast<double>(p->totalGlobalMem) / (1024.0 * 1024.0 * 1024.0)});
  }
  return out;
}

double measure_matmul_flops(const torch::Device& device, int64_t n, int reps) {
  const auto dtype = device.is_cuda() ? torch::kBFloat16 : torch::kFloat;
  const auto on = torch::TensorOptions().device(device).dtype(dtype);
  const torch::Tensor a = torch::randn({n, n}, on), b = torch::randn({n, n}, on);
  torch::Tensor c = torch::empty({n, n}, on);
  auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize(device.index() < 0 ? -1 : device.index());
  };
  for (int i = 0; i < 3; ++i) torch::mm_out(c, a, b);
  sync();
  std::vector<double> seconds;
  for (int i = 0; i < std::max(reps, 1); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    torch::mm_out(c, a, b);
    sync();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) /
         seconds[seconds.size() / 2];
}

}  // namespace normlab
