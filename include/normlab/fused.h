// Faster kernels for the CPU training step, each an autograd function with its own backward,
// tested against the plain ATen composition (tests/unit/test_fused.cpp):
//   rms_norm(x, w, eps) = w * x * rsqrt(mean(x^2) + eps)    one pass per row (float32/float64)
//   rope(x, cos, sin)   = x * cos + cat(-x2, x1) * sin      x (B, T, H, D), tables (T, D)
//   linear(x, w)        = x w^T                             float32 GEMMs through oneDNN
// Other devices and dtypes take the ATen ops (the CUDA kernels are the GPU performance work).
// Measured effect on a training step: docs/performance-cpu.md.
//   swiglu(u)           = silu(u[..., F:]) * u[..., :F]      one pass each way (vectorised exp)
//   cross_entropy(x, t) = mean(lse - x[t]), mean(lse^2)       logits (M, V): no log-probabilities
//                          or one-hot buffers, one pass each way
#pragma once

#include <torch/types.h>

#include <utility>

namespace normlab::fused {

/// `weight` may be undefined (no gain).
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight);
torch::Tensor swiglu(const torch::Tensor& u);
/// (mean cross-entropy, mean logsumexp^2) of logits (M, V) against targets (M), in fp32 or
/// fp64 (reduced-precision logits are upcast); the second term feeds the z-loss.
std::pair<torch::Tensor, torch::Tensor> cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets);

/// Whether linear() uses oneDNN in this build (LibTorch exports its matmul and has oneDNN).
bool onednn_linear_available();

/// True when these tensors take the fused CPU kernels (else the ATen composition).
bool cpu_fusable(const torch::Tensor& x);

}  // namespace normlab::fused
