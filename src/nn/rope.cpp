#include "normlab/nn/rope.h"

#include "normlab/kernels/ops.h"

#include <torch/torch.h>

namespace normlab {

RopeTables rope_tables(int64_t seq_len, int64_t head_dim, double theta, torch::Device device,
                       torch::ScalarType dtype) {
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble).device(device);
  const torch::Tensor i = torch::arange(head_dim / 2, f64);
  const torch::Tensor inv_freq = torch::pow(theta, -2.0 * i / static_cast<double>(head_dim));
  const torch::Tensor pos = torch::arange(seq_len, f64);
  const torch::Tensor angles = torch::outer(pos, inv_freq);             // (T, hd/2)
  const torch::Tensor full = torch::cat({angles, angles}, /*dim=*/-1);  // (T, hd)
  return {full.cos().to(dtype), full.sin().to(dtype)};
}

torch::Tensor rope_apply(const torch::Tensor& x, const RopeTables& t) {
  return kernels::rope(x, t.cos, t.sin);
}

}  // namespace normlab
