// normlab version: normlab's and LibTorch's versions, whether CUDA is usable, the devices seen.
#include <torch/torch.h>

#include <iomanip>
#include <iostream>

#include "command.h"
#include "normlab/nn/fused.h"
#include "normlab/util/device.h"
#include "normlab/version.h"

namespace normlab::cli {

Runner setup_version(CLI::App& sub) {
  return [] {
    std::cout << "normlab " << NORMLAB_VERSION_STRING << "\n"
              << "LibTorch " << torch_version() << "\n"
              << "normlab CUDA kernels: "
              << (fused::own_kernels_archs().empty() ? "not built"
                                                     : "built for sm_" + fused::own_kernels_archs())
              << "\n"
              << "CUDA available: " << (cuda_available() ? "yes" : "no") << "\n"
              << "devices:\n"
              << "  cpu (" << at::get_num_threads() << " threads)\n";
    for (const CudaDeviceInfo& d : cuda_devices()) {
      std::cout << "  cuda:" << d.index << " " << d.name << " (sm_" << d.compute_major
                << d.compute_minor << ", " << std::fixed << std::setprecision(1) << d.memory_gib
                << " GiB)\n";
    }
    return 0;
  };
}

}  // namespace normlab::cli
