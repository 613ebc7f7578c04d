// HybridNorm (Zhuo et al. 2025, "HybridNorm: Towards Stable and Efficient Transformer Training
// via Hybrid Normalization", 2503.04598).
//   attention: no input norm, per-head N_q, N_k, N_v:   X = X + Attn_qkvnorm(X)
//   MLP: post-norm on the main path:                    X~ = N_mlp(X);  X = X~ + MLP(X~)
//   end: Z = N_f(X)
#include <torch/torch.h>

#include "nn/schemes/schemes.h"

namespace normlab::schemes {
namespace {

class HybridNormBlock : public SchemeBlockImpl {
 public:
  HybridNormBlock(const ModelConfig& cfg, int64_t layer, torch::Device device)
      : mlp_norm(add_norm(*this, "mlp_norm", cfg, device)),
        f(add_branches(*this, cfg, layer, device)) {}

  Streams forward(const Streams& s) override {
    // The attention's residual add and the MLP's post-norm are one op (fused on CUDA).
    const torch::Tensor xt = mlp_norm->add_forward(s.x, f.attn(s.x)).second;
    return {xt + f.mlp(xt), {}};
  }

  Norm mlp_norm;
  Branches f;
};

}  // namespace

std::shared_ptr<SchemeBlockImpl> make_hybrid_norm_block(const ModelConfig& cfg, int64_t layer,
                                                        torch::Device device) {
  return std::make_shared<HybridNormBlock>(cfg, layer, device);
}

SchemeParts build_hybrid_norm(const ModelConfig& cfg, torch::nn::Module& owner,
                              torch::Device device) {
  auto exit = final_norm_exit(cfg, owner, device);
  return {make_blocks(cfg, device, make_hybrid_norm_block), enter_single, exit};
}

}  // namespace normlab::schemes
