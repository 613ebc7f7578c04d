// The language-model loss without the whole logits: mean next-token cross-entropy (plus the
// optional z-loss) of logits = h W^T, computed over chunks of rows so that no more than one
// chunk's logits (chunk_rows x V, softmax in fp32) exist at a time. Because the loss ends the
// graph, each chunk's gradients with respect to h and W are formed in the forward pass, while
// the chunk is at hand; the backward only scales them by the incoming gradient. The same
// numbers as cross_entropy(h W^T) up to summation order; on GPUs it removes the (rows x V)
// fp32 logits from the peak memory, on CPUs it keeps each chunk in cache.
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace normlab {

struct ChunkedLoss {
  torch::Tensor loss;  // () ce + z_loss * z: differentiable with respect to h and weight
  torch::Tensor ce;    // () mean cross-entropy (not differentiable)
  torch::Tensor z;     // () mean logsumexp^2 (not differentiable; defined when z_loss > 0)
};

/// h (N, C), weight (V, C), targets (N) int64. chunk_rows > 0.
ChunkedLoss linear_cross_entropy(const torch::Tensor& h, const torch::Tensor& weight,
                                 const torch::Tensor& targets, double z_loss, int64_t chunk_rows);

}  // namespace normlab
