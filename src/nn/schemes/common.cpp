// Pieces the scheme files share: stream entry, norm and branch construction, c_l.
#include <torch/torch.h>

#include <cmath>

#include "nn/schemes/schemes.h"
#include "normlab/util/library_error.h"

namespace normlab::schemes {

Streams enter_single(const torch::Tensor& embedding) { return {embedding, {}}; }

Streams enter_twin(const torch::Tensor& embedding) { return {embedding, embedding}; }

Norm add_norm(torch::nn::Module& m, const std::string& name, const ModelConfig& cfg,
              torch::Device device) {
  return m.register_module(name, Norm(norm_options(cfg, cfg.d_model, device)));
}

std::function<torch::Tensor(const Streams&)> final_norm_exit(const ModelConfig& cfg,
                                                             torch::nn::Module& owner,
                                                             torch::Device device) {
  Norm n = add_norm(owner, "final_norm", cfg, device);
  return [n](const Streams& s) mutable { return n(s.x); };
}

torch::Tensor FeedForward::operator()(const torch::Tensor& x) {
  try {
    return moe ? moe(x) : dense(x);
  } catch (...) {
    rethrow_with_context(".mlp");
  }
}

Branches add_branches(torch::nn::Module& m, const ModelConfig& cfg, int64_t layer,
                      torch::Device device) {
  Branches b;
  b.attn = m.register_module("attn", Attention(attention_options(cfg, device)));
  if (cfg.is_moe_layer(layer)) {
    b.mlp.moe = m.register_module("mlp", Moe(cfg, device));
    init_branches(cfg, layer, *b.attn, *b.mlp.moe);
  } else {
    b.mlp.dense = m.register_module("mlp", Mlp(cfg.d_model, cfg.d_ff, device));
    init_branches(cfg, layer, *b.attn, *b.mlp.dense);
  }
  return b;
}

void FeedForward::scale_(double beta) {
  torch::NoGradGuard no_grad;
  if (dense) {
    dense->up->weight.mul_(beta);
    dense->down->weight.mul_(beta);
  }
  if (moe) {
    moe->experts->up.mul_(beta);
    moe->experts->down.mul_(beta);
  }
}

void FeedForward::scale_output_(double m) {
  torch::NoGradGuard no_grad;
  if (dense) dense->down->weight.mul_(m);
  if (moe) moe->experts->down.mul_(m);
}

double siamese_depth_scale(const ModelConfig& cfg, int64_t layer) {
  return cfg.siamese.depth_scale ? std::sqrt(2.0 * static_cast<double>(layer + 1)) : 1.0;
}

}  // namespace normlab::schemes
