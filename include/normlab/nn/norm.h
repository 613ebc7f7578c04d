// Norm: RMSNorm (default) or LayerNorm over the last dimension, with an optional gain and no
// bias, always computed in at least fp32 (docs/paper.md, Conventions):
//   rmsnorm:   y = w * x * rsqrt(mean(x^2) + eps)
//   layernorm: y = w * (x - mean(x)) * rsqrt(var(x) + eps)
// RMSNorm runs normlab's own kernel on the CPU (kernels/ops.h); add_forward fuses the residual add
// before the norm (kernels::add_rms_norm, on the CPU and on CUDA). Example:
// Norm n(NormOptions(512).eps(1e-5)); auto y = n(x);
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <utility>

#include "normlab/nn/model_config.h"

namespace normlab {

struct NormOptions {
  explicit NormOptions(int64_t dim) : dim_(dim) {}
  TORCH_ARG(int64_t, dim);
  TORCH_ARG(double, eps) = 1e-5;
  TORCH_ARG(NormType, type) = NormType::RmsNorm;
  /// A learnable per-channel gain `weight`, initialised to 1.
  TORCH_ARG(bool, gain) = true;
  TORCH_ARG(torch::Device, device) = torch::kCPU;
};

class NormImpl : public torch::nn::Module {
 public:
  explicit NormImpl(const NormOptions& options);
  torch::Tensor forward(const torch::Tensor& x);
  /// The residual add before the norm, and the norm: (r, forward(r)) with r = x + b / divisor.
  /// RMSNorm on tensors the CUDA kernels take goes through kernels::add_rms_norm (one pass);
  /// everything else is the add, then forward().
  std::pair<torch::Tensor, torch::Tensor> add_forward(const torch::Tensor& x,
                                                      const torch::Tensor& b, double divisor = 1.0);
  void pretty_print(std::ostream& stream) const override;

  NormOptions options;
  torch::Tensor weight;  // (dim) or undefined without gain
};
TORCH_MODULE(Norm);

/// The options of a `dim`-wide norm of this model (type and eps from the config).
NormOptions norm_options(const ModelConfig& cfg, int64_t dim, torch::Device device);

}  // namespace normlab
