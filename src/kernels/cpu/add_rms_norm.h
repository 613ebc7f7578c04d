// The CPU side of kernels::add_rms_norm (ops.h), private to the kernels wing: the public
// fusable_add_rms_norm and add_rms_norm dispatch here for CPU tensors.
#pragma once

#include <torch/types.h>

#include <utility>

namespace normlab::kernels::cpu {

/// x and b of one shape on the CPU, non-empty; float32 x with float32 or bfloat16 b, or both
/// bfloat16, or both float64; a one-dimensional gain of the last dimension's size in the numbers
/// the rows compute in (float64 for float64 rows, else float32).
bool add_rms_norm_fits(const torch::Tensor& x, const torch::Tensor& b, const torch::Tensor& weight);

/// (r, n) of ops.h's add_rms_norm, for tensors that add_rms_norm_fits accepts.
std::pair<torch::Tensor, torch::Tensor> add_rms_norm(const torch::Tensor& x, const torch::Tensor& b,
                                                     double divisor, const torch::Tensor& weight,
                                                     double eps);

}  // namespace normlab::kernels::cpu
