// Mix-LN (Li et al. 2024, "Mix-LN: Unleashing the Power of Deeper Layers by Combining Pre-LN
// and Post-LN", 2412.13795): Post-Norm blocks for the first P layers, Pre-Norm blocks after.
//   l < P:  X = N(X + F(X));   l >= P:  X = X + F(N(X));   end: Z = N_f(X)
// P = model.mix_ln_post_layers, by default floor(L / 4).
#include <torch/torch.h>

#include "nn/schemes/schemes.h"

namespace normlab::schemes {

SchemeParts build_mix_ln(const ModelConfig& cfg, torch::nn::Module& owner, torch::Device device) {
  auto exit = final_norm_exit(cfg, owner, device);
  auto make = [](const ModelConfig& c, int64_t l, torch::Device d) {
    return l < c.mix_post_layers() ? make_post_norm_block(c, l, d) : make_pre_norm_block(c, l, d);
  };
  return {make_blocks(cfg, device, make), enter_single, exit};
}

}  // namespace normlab::schemes
