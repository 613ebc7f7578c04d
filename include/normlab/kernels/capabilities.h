// What this build and this machine offer normlab's kernels (ops.h): for `normlab version`, the
// benchmarks, the tests, and the choices made above the model. The model's own code reaches the
// kernels through ops.h alone.
#pragma once

#include <string>

namespace normlab::kernels {

/// The instruction set of the float32 loops of the CPU kernels: "AVX512", "AVX2" (with FMA) or
/// "portable", following ATen's CPU capability (so ATEN_CPU_CAPABILITY lowers them with ATen's
/// kernels); "portable" off x86-64 or off GCC and Clang. Fixed for the process.
std::string vector_isa();

/// How many of ATen's threads the CPU kernels' at::parallel_for reaches: a two-task loop is run
/// and its calls counted. 2 where ATen has two threads or more and this build compiled the
/// kernels with OpenMP (cmake/NormlabTorch.cmake); 1 where they run on the calling thread.
int kernel_threads();

/// Whether linear() uses oneDNN here: LibTorch exports its matmul, has oneDNN, and lets the
/// matmul run on this CPU as oneDNN sees it (onednn_matmul_usable, util/cpu_class.h); else
/// ATen's linear.
bool onednn_linear_available();

/// Whether causal_attention's per-head path can run: this build links the BLAS GEMMs LibTorch
/// carries and they computed known products (docs/dependencies.md).
bool blas_available();

/// The CUDA architectures normlab's own kernels (src/kernels/cuda) were compiled for, e.g. "90";
/// empty when this build has no CUDA kernels (NORMLAB_CUDA off or no nvcc).
std::string own_kernels_archs();

}  // namespace normlab::kernels
