#include "normlab/device.h"

#include <ATen/cuda/CUDAContextLight.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include "build_config.h"
#if NORMLAB_WITH_CUDA
#include "kernels/kernels.h"
#endif

namespace normlab {

std::string torch_version() { return TORCH_VERSION; }

bool cuda_available() { return torch::cuda::is_available(); }

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

std::string own_kernels_archs() {
#if NORMLAB_WITH_CUDA
  return kernels::compiled() ? NORMLAB_CUDA_ARCHS : "";
#else
  return "";
#endif
}

}  // namespace normlab
