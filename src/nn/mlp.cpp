#include "normlab/nn/mlp.h"

#include <torch/torch.h>

#include "normlab/kernels/ops.h"

namespace normlab {

MlpImpl::MlpImpl(int64_t d_model, int64_t d_ff, torch::Device device) {
  up = register_module("up", Linear(d_model, 2 * d_ff, device));
  down = register_module("down", Linear(d_ff, d_model, device));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) { return down(kernels::swiglu(up(x))); }

void MlpImpl::pretty_print(std::ostream& stream) const {
  stream << "normlab::Mlp(" << up->weight.size(1) << " -> " << down->weight.size(1) << " -> "
         << down->weight.size(0) << ", SwiGLU)";
}

}  // namespace normlab
