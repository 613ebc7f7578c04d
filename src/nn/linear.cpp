#include "normlab/nn/linear.h"

#include "normlab/kernels/ops.h"

#include <torch/torch.h>

namespace normlab {

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, torch::Device device) {
  weight = register_parameter("weight", torch::zeros({out_features, in_features}, device));
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) { return kernels::linear(x, weight); }

void LinearImpl::pretty_print(std::ostream& stream) const {
  stream << "normlab::Linear(" << weight.size(1) << " -> " << weight.size(0) << ")";
}

EmbeddingImpl::EmbeddingImpl(int64_t vocab_size, int64_t dim, torch::Device device) {
  weight = register_parameter("weight", torch::zeros({vocab_size, dim}, device));
}

torch::Tensor EmbeddingImpl::forward(const torch::Tensor& ids) {
  return torch::embedding(weight, ids);
}

void EmbeddingImpl::pretty_print(std::ostream& stream) const {
  stream << "normlab::Embedding(" << weight.size(0) << ", " << weight.size(1) << ")";
}

}  // namespace normlab
