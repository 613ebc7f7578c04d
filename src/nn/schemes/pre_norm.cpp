// Pre-Norm (Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture").
//   X = X + Attn(N_attn(X));  X = X + MLP(N_mlp(X));   end: Z = N_f(X)
#include <torch/torch.h>

#include "nn/schemes/schemes.h"

namespace normlab::schemes {
namespace {

class PreNormBlock : public SchemeBlockImpl {
 public:
  PreNormBlock(const ModelConfig& cfg, int64_t layer, torch::Device device)
      : attn_norm(add_norm(*this, "attn_norm", cfg, device)),
        mlp_norm(add_norm(*this, "mlp_norm", cfg, device)),
        f(add_branches(*this, cfg, layer, device)) {}

  Streams forward(const Streams& s) override {
    // The residual add of the attention and the MLP's input norm are one op (fused on CUDA).
    const auto [x, h] = mlp_norm->add_forward(s.x, f.attn(attn_norm(s.x)));
    return {x + f.mlp(h), {}};
  }

  Norm attn_norm, mlp_norm;
  Branches f;
};

}  // namespace

std::shared_ptr<SchemeBlockImpl> make_pre_norm_block(const ModelConfig& cfg, int64_t layer,
                                                     torch::Device device) {
  return std::make_shared<PreNormBlock>(cfg, layer, device);
}

SchemeParts build_pre_norm(const ModelConfig& cfg, torch::nn::Module& owner, torch::Device device) {
  auto exit = final_norm_exit(cfg, owner, device);
  return {make_blocks(cfg, device, make_pre_norm_block), enter_single, exit};
}

}  // namespace normlab::schemes
