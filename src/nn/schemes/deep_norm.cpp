// DeepNorm (Wang et al. 2022, "DeepNet: Scaling Transformers to 1,000 Layers", 2203.00555).
//   X = N_attn(alpha X + Attn(X));  X = N_mlp(alpha X + MLP(X));   end: Z = X
// Decoder-only constants: alpha = (2L)^(1/4); at init the value rows of the fused qkv
// projection, the attention output and both MLP matrices are scaled by beta = (8L)^(-1/4)
// (query and key rows are not). model.deep_norm_alpha / deep_norm_beta override them.
#include <torch/torch.h>

#include "nn/schemes/schemes.h"

namespace normlab::schemes {
namespace {

class DeepNormBlock : public SchemeBlockImpl {
 public:
  DeepNormBlock(const ModelConfig& cfg, int64_t layer, torch::Device device)
      : alpha(cfg.deep_alpha()),
        attn_norm(add_norm(*this, "attn_norm", cfg, device)),
        mlp_norm(add_norm(*this, "mlp_norm", cfg, device)),
        f(add_branches(*this, cfg, layer, device)) {
    const double beta = cfg.deep_beta();
    const int64_t qk_rows = (cfg.n_heads + cfg.kv_heads()) * cfg.head_dim();
    torch::NoGradGuard no_grad;
    f.attn->qkv->weight.narrow(0, qk_rows, cfg.kv_heads() * cfg.head_dim()).mul_(beta);  // V rows
    f.attn->out->weight.mul_(beta);
    f.mlp.scale_(beta);  // the MLP's matrices (every expert's with MoE)
  }

  Streams forward(const Streams& s) override {
    torch::Tensor x = s.x;
    x = attn_norm(alpha * x + f.attn(x));
    x = mlp_norm(alpha * x + f.mlp(x));
    return {x, {}};
  }

  void pretty_print(std::ostream& stream) const override {
    stream << "DeepNormBlock(alpha=" << alpha << ")";
  }

  double alpha;
  Norm attn_norm, mlp_norm;
  Branches f;
};

}  // namespace

SchemeParts build_deep_norm(const ModelConfig& cfg, torch::nn::Module& owner,
                            torch::Device device) {
  return {make_blocks(cfg, device, block_of<DeepNormBlock>), enter_single,
          [](const Streams& s) { return s.x; }};
}

}  // namespace normlab::schemes
