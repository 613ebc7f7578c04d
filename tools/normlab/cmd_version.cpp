// normlab version: normlab's and LibTorch's versions, whether CUDA is usable, the devices seen,
// the CPU class as the kernels see it (oneDNN's ISA, ATen's kernels, the linear path, bf16
// native or emulated) and what train.precision = auto chooses here.
#include <torch/torch.h>

#include <iomanip>
#include <iostream>

#include "command.h"
#include "fault.h"
#include "normlab/kernels/capabilities.h"
#include "normlab/train/precision.h"
#include "normlab/util/cpu_class.h"
#include "normlab/util/device.h"
#include "normlab/version.h"

namespace normlab::cli {

Runner setup_version(CLI::App& sub) {
  return [] {
    const CpuClass cpu = cpu_class(onednn_max_isa_from_environment());
    const std::string& cpu_bf16 = cpu.bf16;
    std::cout << "normlab " << NORMLAB_VERSION_STRING << "\n"
              << "LibTorch " << torch_version() << "\n"
              << "normlab CUDA kernels: "
              << (kernels::own_kernels_archs().empty()
                      ? "not built"
                      : "built for sm_" + kernels::own_kernels_archs())
              << "\n"
              << "CUDA available: " << (cuda_available() ? "yes" : "no") << "\n"
              << "devices:\n"
              << "  cpu (" << at::get_num_threads() << " threads, bf16 "
              << (cpu_bf16.empty() ? "emulated: no AMX, no AVX512-BF16" : "native: " + cpu_bf16)
              << ")\n";
    std::cout << "  cpu class: " << cpu.describe() << "\n";
    for (const CudaDeviceInfo& d : cuda_devices()) {
      std::cout << "  cuda:" << d.index << " " << d.name << " (sm_" << d.compute_major
                << d.compute_minor << ", " << std::fixed << std::setprecision(1) << d.memory_gib
                << " GiB)\n";
    }
    const torch::Device device = resolve_device("auto");
    std::cout << "train.precision = auto on " << device.str() << ": "
              << choose_precision(Precision::Auto, device, cpu).reason << "\n";
    if (fault_injection_built())  // a test build (fault.h): never in a build for use
      std::cout << "fault injection: built in (NORMLAB_FAULT honoured; a test build)\n";
    return 0;
  };
}

}  // namespace normlab::cli
