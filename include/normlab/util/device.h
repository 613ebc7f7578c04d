// What this process can compute on: LibTorch's version and the CUDA devices it sees.
#pragma once

#include <torch/types.h>

#include <map>
#include <string>
#include <vector>

namespace normlab {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;       // e.g. "NVIDIA H200"
  int compute_major = 0;  // compute capability, e.g. 9.0
  int compute_minor = 0;
  double memory_gib = 0.0;  // total device memory
};

/// "2.11.0" : the LibTorch version normlab was compiled against.
std::string torch_version();
/// True when LibTorch was built with CUDA and at least one device is usable.
bool cuda_available();
/// The device a run names (train.device): "auto" is CUDA when available, else the CPU; a CUDA
/// device without an index takes `default_index` (the launcher's local rank; -1: GPU 0).
/// Throws std::invalid_argument when CUDA is named and not available, or the name is not a
/// device.
torch::Device resolve_device(const std::string& name, int default_index = -1);

/// Where a launcher placed this process, for choosing its GPU (the program fills it from the
/// environment; the library reads none).
struct GpuPlacement {
  int local_rank = -1;  // the launcher's local rank; -1: none was given
  int world = 1;        // processes in the job
  // The variables behind the choice, named with their values in errors: the local rank's
  // (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID) and the device filters
  // (CUDA_VISIBLE_DEVICES, SLURM_GPUS_PER_TASK, ...). Unset ones are absent.
  std::map<std::string, std::string> vars;
};

/// The CUDA device index this process uses when `visible` devices are visible to it:
///   one visible device             0 (Slurm --gpus-per-task 1, or CUDA_VISIBLE_DEVICES set to
///                                  one id per rank), whatever the local rank
///   local rank r < visible         r
///   no local rank, world 1         0 (a single process)
/// Throws ConfigError, one line naming the variables and their values, when no device is
/// visible, when the local rank is not below the visible count (local rank 3 with 2 devices),
/// and when several devices are visible to a rank of a multi-process job with no local rank.
int choose_cuda_index(const GpuPlacement& placement, int visible);
/// resolve_device for a rank: "cuda" or "auto" on a CUDA machine without an index takes
/// choose_cuda_index(placement, the visible device count).
torch::Device resolve_device(const std::string& name, const GpuPlacement& placement);
/// The memory `device` has in all, in bytes: a CUDA device's global memory, or the machine's
/// physical memory for the CPU.
double device_capacity_bytes(const torch::Device& device);
/// The CUDA devices visible to this process (empty without CUDA).
std::vector<CudaDeviceInfo> cuda_devices();
/// Memory in use on `device`, in bytes: the CUDA caching allocator's allocated bytes (peak
/// since the last reset when `peak`), or the process's resident set size on the CPU (its
/// high-water mark when `peak`).
double device_memory_bytes(const torch::Device& device, bool peak = false);

/// The dense matmul rate this device reaches now, in FLOP/s: the median of `reps` timed
/// (n x n) @ (n x n) products after a warm-up, synchronised, in bf16 on CUDA and fp32 on the
/// CPU. The denominator of the "measured" MFU beside the nominal one.
double measure_matmul_flops(const torch::Device& device, int64_t n = 8192, int reps = 10);

}  // namespace normlab
