// HybridNorm* (Zhuo et al. 2025): HybridNorm whose block 0 is Pre-Norm for both sub-layers,
// its attention input normed and the per-head q/k/v norms kept:
//   block 0:  X = X + Attn_qkvnorm(N_attn(X));  X = X + MLP(N_mlp(X))
//   blocks 1..L-1: HybridNorm blocks;   end: Z = N_f(X)
#include <torch/torch.h>

#include "nn/schemes/schemes.h"

namespace normlab::schemes {

SchemeParts build_hybrid_norm_star(const ModelConfig& cfg, torch::nn::Module& owner,
                                   torch::Device device) {
  auto exit = final_norm_exit(cfg, owner, device);
  auto make = [](const ModelConfig& c, int64_t l, torch::Device d) {
    // The scheme forces q/k/v norms, so the Pre-Norm block 0 gets them too.
    return l == 0 ? make_pre_norm_block(c, l, d) : make_hybrid_norm_block(c, l, d);
  };
  return {make_blocks(cfg, device, make), enter_single, exit};
}

}  // namespace normlab::schemes
