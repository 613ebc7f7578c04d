// What this process can compute on: LibTorch's version and the CUDA devices it sees.
#pragma once

#include <torch/types.h>

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
