// Rotary position embedding in the rotate-half form of the reference implementation:
//   rope(x) = x * cos + cat(-x2, x1) * sin,  x = [x1 | x2] split in halves of the head dim,
//   angle(pos, i) = pos * theta^(-2i / head_dim) for i < head_dim / 2, duplicated over halves.
#pragma once

#include <torch/types.h>

namespace normlab {

struct RopeTables {
  torch::Tensor cos;  // (T, head_dim)
  torch::Tensor sin;  // (T, head_dim)
};

/// Tables for positions 0..seq_len-1; angles are computed in float64, then cast to `dtype`.
RopeTables rope_tables(int64_t seq_len, int64_t head_dim, double theta, torch::Device device,
                       torch::ScalarType dtype);

/// Rotates x of shape (B, T, H, head_dim) by the tables (T must match); fused on CPU.
torch::Tensor rope_apply(const torch::Tensor& x, const RopeTables& tables);

}  // namespace normlab
