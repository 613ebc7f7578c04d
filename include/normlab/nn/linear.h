// Linear and Embedding: bias-free weight modules whose parameters are created directly on the
// requested device (including the meta device, for counting without allocating).
//   Linear:    y = x W^T,   W (out, in)     -> parameter "weight"
//   Embedding: y = W[ids],  W (vocab, dim)  -> parameter "weight"
// Initialisation is the caller's (init.h); new weights are zero.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

namespace normlab {

class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in_features, int64_t out_features, torch::Device device = torch::kCPU);
  torch::Tensor forward(const torch::Tensor& x);
  void pretty_print(std::ostream& stream) const override;

  torch::Tensor weight;  // (out, in)
};
TORCH_MODULE(Linear);

class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t vocab_size, int64_t dim, torch::Device device = torch::kCPU);
  torch::Tensor forward(const torch::Tensor& ids);  // (B, T) int64 -> (B, T, dim)
  void pretty_print(std::ostream& stream) const override;

  torch::Tensor weight;  // (vocab, dim)
};
TORCH_MODULE(Embedding);

}  // namespace normlab
