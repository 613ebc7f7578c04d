// Peri-LN (Kim et al. 2025, "Peri-LN: Revisiting Normalization Layer in the Transformer
// Architecture", 2502.02732): a norm on both sides of each branch.
//   X = X + N_attn_out(Attn(N_attn(X)));  X = X + N_mlp_out(MLP(N_mlp(X)));   end: Z = N_f(X)
#include <torch/torch.h>

#include "nn/schemes/schemes.h"

namespace normlab::schemes {
namespace {

class PeriNormBlock : public SchemeBlockImpl {
 public:
  PeriNormBlock(const ModelConfig& cfg, int64_t layer, torch::Device device)
      : attn_norm(add_norm(*this, "attn_norm", cfg, device)),
        attn_out_norm(add_norm(*this, "attn_out_norm", cfg, device)),
        mlp_norm(add_norm(*this, "mlp_norm", cfg, device)),
        mlp_out_norm(add_norm(*this, "mlp_out_norm", cfg, device)),
        f(add_branches(*this, cfg, layer, device)) {}

  Streams forward(const Streams& s) override {
    torch::Tensor x = s.x;
    x = x + attn_out_norm(f.attn(attn_norm(x)));
    x = x + mlp_out_norm(f.mlp(mlp_norm(x)));
    return {x, {}};
  }

  Norm attn_norm, attn_out_norm, mlp_norm, mlp_out_norm;
  Branches f;
};

}  // namespace

SchemeParts build_peri_norm(const ModelConfig& cfg, torch::nn::Module& owner,
                            torch::Device device) {
  auto exit = final_norm_exit(cfg, owner, device);
  return {make_blocks(cfg, device, block_of<PeriNormBlock>), enter_single, exit};
}

}  // namespace normlab::schemes
