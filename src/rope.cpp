#include "normlab/rope.h"

#include <torch/torch.h>

namespace normlab {

RopeTables rope_tables(int64_t seq_len, int64_t head_dim, double theta, torch::Device device,
                       torch::ScalarType dtype) {
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble).device(device);
  const torch::Tensor i = torch::arange(head_dim / 2, f64);
  const torch::Tensor inv_freq = torch::pow(theta, -2.0 * i / static_cast<double>(head_dim));
  const torch::Tensor pos = torch::arange(seq_len, f64);
  const torch::Tensor angles = torch::outer(pos, inv_freq);           // (T, hd/2)
  const torch::Tensor full = torch::cat({angles, angles}, /*dim=*/-1);  // (T, hd)
  return {full.cos().to(dtype), full.sin().to(dtype)};
}

torch::Tensor rope_apply(const torch::Tensor& x, const RopeTables& t) {
  const int64_t half = x.size(-1) / 2;
  const torch::Tensor x1 = x.narrow(-1, 0, half);
  const torch::Tensor x2 = x.narrow(-1, half, half);
  const torch::Tensor rotated = torch::cat({-x2, x1}, /*dim=*/-1);
  return x * t.cos + rotated * t.sin;
}

}  // namespace normlab
