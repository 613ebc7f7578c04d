// ResiDual (Xie et al. 2023, "ResiDual: Transformer with Dual Residual Connections",
// 2304.14802). Two streams from the embedding; only the Post-Norm stream X feeds the branches:
//   O = F(X);  X = N(X + O);  Y = Y + O          for each sub-layer (F = Attn, then MLP)
//   end: Z = X + N_y(Y)
#include <torch/torch.h>

#include "nn/schemes/schemes.h"

namespace normlab::schemes {
namespace {

class ResiDualBlock : public SchemeBlockImpl {
 public:
  ResiDualBlock(const ModelConfig& cfg, int64_t layer, torch::Device device)
      : attn_norm(add_norm(*this, "attn_norm", cfg, device)),
        mlp_norm(add_norm(*this, "mlp_norm", cfg, device)),
        f(add_branches(*this, cfg, layer, device)) {}

  Streams forward(const Streams& s) override {
    torch::Tensor x = s.x, y = s.y;
    // X's add-then-norm is one op (fused on CUDA).
    const torch::Tensor a = f.attn(x);
    x = attn_norm->add_forward(x, a).second;
    y = y + a;
    const torch::Tensor g = f.mlp(x);
    x = mlp_norm->add_forward(x, g).second;
    y = y + g;
    return {x, y};
  }

  Norm attn_norm, mlp_norm;
  Branches f;
};

}  // namespace

SchemeParts build_resi_dual(const ModelConfig& cfg, torch::nn::Module& owner,
                            torch::Device device) {
  Norm final_norm_y = add_norm(owner, "final_norm_y", cfg, device);
  return {make_blocks(cfg, device, block_of<ResiDualBlock>), enter_twin,
          [final_norm_y](const Streams& s) mutable { return s.x + final_norm_y(s.y); }};
}

}  // namespace normlab::schemes
