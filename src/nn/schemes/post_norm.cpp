// Post-Norm (Vaswani et al. 2017, the original Transformer).
//   X = N_attn(X + Attn(X));  X = N_mlp(X + MLP(X));   end: Z = X (no extra norm)
#include <torch/torch.h>

#include "nn/schemes/schemes.h"

namespace normlab::schemes {
namespace {

class PostNormBlock : public SchemeBlockImpl {
 public:
  PostNormBlock(const ModelConfig& cfg, int64_t layer, torch::Device device)
      : attn_norm(add_norm(*this, "attn_norm", cfg, device)),
        mlp_norm(add_norm(*this, "mlp_norm", cfg, device)),
        f(add_branches(*this, cfg, layer, device)) {}

  Streams forward(const Streams& s) override {
    // Each add-then-norm is one op (fused on CUDA); only the normed stream goes on.
    const torch::Tensor x = attn_norm->add_forward(s.x, f.attn(s.x)).second;
    return {mlp_norm->add_forward(x, f.mlp(x)).second, {}};
  }

  Norm attn_norm, mlp_norm;
  Branches f;
};

}  // namespace

std::shared_ptr<SchemeBlockImpl> make_post_norm_block(const ModelConfig& cfg, int64_t layer,
                                                      torch::Device device) {
  return std::make_shared<PostNormBlock>(cfg, layer, device);
}

SchemeParts build_post_norm(const ModelConfig& cfg, torch::nn::Module& owner,
                            torch::Device device) {
  return {make_blocks(cfg, device, make_post_norm_block), enter_single,
          [](const Streams& s) { return s.x; }};
}

}  // namespace normlab::schemes
