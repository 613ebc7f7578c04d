// kernels/capabilities.h, and the instruction set of the private layer (isa.h).
#include "normlab/kernels/capabilities.h"

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <torch/types.h>

#include <atomic>

#include "blas.h"
#include "build_config.h"
#include "isa.h"
#include "normlab/kernels/ops.h"

#if NORMLAB_WITH_CUDA
#include "kernels/cuda/launchers.h"
#endif

namespace normlab::kernels {

namespace cpu {

Isa isa() {
  static const Isa chosen = [] {
#if NORMLAB_VECTOR_ISAS
    const std::string aten = at::get_cpu_capability();
    if (aten == "AVX512") return Isa::Avx512;
    if (aten == "AVX2") return Isa::Avx2;
#endif
    return Isa::Portable;
  }();
  return chosen;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return "AVX512";
    case Isa::Avx2: return "AVX2";
    case Isa::Portable: break;
  }
  return "portable";
}

}  // namespace cpu

std::string vector_isa() { return cpu::isa_name(cpu::isa()); }

int kernel_threads() {
  std::atomic<int> calls{0};
  at::parallel_for(0, 2, 1, [&](int64_t, int64_t) { calls.fetch_add(1); });
  return calls.load();
}

bool blas_available() { return cpu::blas::available(); }

std::string own_kernels_archs() {
#if NORMLAB_WITH_CUDA
  return cuda::compiled() ? NORMLAB_CUDA_ARCHS : "";
#else
  return "";
#endif
}

bool cpu_fusable(const torch::Tensor& x) {
  const auto t = x.scalar_type();
  return x.device().is_cpu() &&
         (t == torch::kFloat || t == torch::kDouble || t == torch::kBFloat16);
}

}  // namespace normlab::kernels
