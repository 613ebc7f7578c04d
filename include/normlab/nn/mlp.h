// SwiGLU MLP, the shared MLP branch of every scheme, in the reference layout: one input
// projection of width 2*d_ff whose first half is the value and second half the gate.
//   [v | g] = W_up x;  y = W_down (silu(g) * v)
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include "normlab/nn/linear.h"

namespace normlab {

class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(int64_t d_model, int64_t d_ff, torch::Device device = torch::kCPU);
  torch::Tensor forward(const torch::Tensor& x);  // (..., C) -> (..., C)
  void pretty_print(std::ostream& stream) const override;

  Linear up{nullptr};    // (2*d_ff, C)
  Linear down{nullptr};  // (C, d_ff)
};
TORCH_MODULE(Mlp);

}  // namespace normlab
