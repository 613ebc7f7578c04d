// Reordered norm (OLMo 2: Team OLMo, "2 OLMo 2 Furious", 2501.00656, section "reordered norm and
// QK-norm"): the norm on each branch's output only; the branch reads the raw residual stream.
//   X = X + N_attn_out(Attn(X));  X = X + N_mlp_out(MLP(X));   end: Z = N_f(X)
// This is Peri-LN without its input norms. It does not turn on OLMo 2's QK-norm: that is
// model.qk_norm: full, which composes with every single-stream scheme.
#include <torch/torch.h>

#include "nn/schemes/schemes.h"

namespace normlab::schemes {
namespace {

class ReorderedNormBlock : public SchemeBlockImpl {
 public:
  ReorderedNormBlock(const ModelConfig& cfg, int64_t layer, torch::Device device)
      : attn_out_norm(add_norm(*this, "attn_out_norm", cfg, device)),
        mlp_out_norm(add_norm(*this, "mlp_out_norm", cfg, device)),
        f(add_branches(*this, cfg, layer, device)) {}

  Streams forward(const Streams& s) override {
    torch::Tensor x = s.x;
    x = x + attn_out_norm(f.attn(x));
    x = x + mlp_out_norm(f.mlp(x));
    return {x, {}};
  }

  Norm attn_out_norm, mlp_out_norm;
  Branches f;
};

}  // namespace

SchemeParts build_reordered_norm(const ModelConfig& cfg, torch::nn::Module& owner,
                                 torch::Device device) {
  auto exit = final_norm_exit(cfg, owner, device);
  return {make_blocks(cfg, device, block_of<ReorderedNormBlock>), enter_single, exit};
}

}  // namespace normlab::schemes
