// Faster kernels for the CPU training step, each an autograd function with its own backward,
// tested against the plain ATen composition (tests/unit/test_fused.cpp):
//   rms_norm(x, w, eps) = w * x * rsqrt(mean(x^2) + eps)    one pass per row (float32/float64)
//   rope(x, cos, sin)   = x * cos + cat(-x2, x1) * sin      x (B, T, H, D), tables (T, D)
//   linear(x, w)        = x w^T                             float32 GEMMs through oneDNN
// Other devices and dtypes take the ATen ops (the CUDA kernels are the GPU performance work).
// Measured effect on a training step: docs/performance-cpu.md, which also lists what was
// tried and dropped (a one-pass SwiGLU and cross-entropy were no faster than ATen's).
#pragma once

#include <torch/types.h>

namespace normlab::fused {

/// `weight` may be undefined (no gain).
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight);


/// Whether linear() uses oneDNN in this build (LibTorch exports its matmul and has oneDNN).
bool onednn_linear_available();

/// True when these tensors take the fused CPU kernels (else the ATen composition).
bool cpu_fusable(const torch::Tensor& x);

}  // namespace normlab::fused
