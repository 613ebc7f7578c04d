#include "normlab/nn/init.h"

#include <torch/torch.h>

#include <cmath>

namespace normlab {

BranchStds branch_stds(const ModelConfig& cfg, int64_t layer) {
  const double d = static_cast<double>(cfg.d_model), dff = static_cast<double>(cfg.d_ff);
  const double depth = static_cast<double>(layer + 1);
  switch (cfg.init) {
    case InitMethod::Mitchell:
      return {1.0 / std::sqrt(d), 1.0 / std::sqrt(2.0 * d * depth), 1.0 / std::sqrt(d),
              1.0 / std::sqrt(2.0 * dff * depth)};
    case InitMethod::Normal: return {cfg.init_std, cfg.init_std, cfg.init_std, cfg.init_std};
    case InitMethod::Megatron: {
      const double scaled = cfg.init_std / std::sqrt(2.0 * static_cast<double>(cfg.n_layers));
      return {cfg.init_std, scaled, cfg.init_std, scaled};
    }
  }
  return {cfg.init_std, cfg.init_std, cfg.init_std, cfg.init_std};
}

double embedding_std(const ModelConfig& cfg) {
  return cfg.init == InitMethod::Mitchell ? 1.0 / std::sqrt(static_cast<double>(cfg.d_model))
                                          : cfg.init_std;
}

void trunc_normal_(torch::Tensor w, double std) {
  torch::NoGradGuard no_grad;
  // u ~ U(Phi(-3), Phi(3)) mapped through the inverse normal CDF: sqrt(2) erfinv(2u - 1).
  const double lo = 0.5 * (1.0 + std::erf(-3.0 / std::sqrt(2.0)));
  const double hi = 0.5 * (1.0 + std::erf(3.0 / std::sqrt(2.0)));
  // Drawn and mapped in float64, then rounded to the parameter's dtype: ATen's vectorised and
  // portable CPU kernels (ATEN_CPU_CAPABILITY) compute uniform_ and erfinv_ with different
  // rounding, about one ulp of the draw; in float64 that ulp vanishes in the rounding to float32,
  // so one seed gives the same float32 weights on every CPU.
  torch::Tensor t = torch::empty(w.sizes(), w.options().dtype(torch::kDouble));
  t.uniform_(2.0 * lo - 1.0, 2.0 * hi - 1.0);
  t.erfinv_();
  t.mul_(std * std::sqrt(2.0));
  t.clamp_(-3.0 * std, 3.0 * std);
  w.copy_(t);
}

void init_branches(const ModelConfig& cfg, int64_t layer, AttentionImpl& attn, MlpImpl& mlp) {
  const BranchStds s = branch_stds(cfg, layer);
  trunc_normal_(attn.qkv->weight, s.qkv);
  trunc_normal_(attn.out->weight, s.attn_out);
  trunc_normal_(mlp.up->weight, s.mlp_up);
  trunc_normal_(mlp.down->weight, s.mlp_down);
}

void init_branches(const ModelConfig& cfg, int64_t layer, AttentionImpl& attn, MoeImpl& moe) {
  ModelConfig expert_cfg = cfg;
  expert_cfg.d_ff = cfg.expert_width();
  const BranchStds s = branch_stds(expert_cfg, layer);
  trunc_normal_(attn.qkv->weight, s.qkv);
  trunc_normal_(attn.out->weight, s.attn_out);
  trunc_normal_(moe.router->weight, s.mlp_up);
  // Expert by expert, up then down, as when each expert was its own Mlp: a seed draws the
  // same weights in the stacked layout.
  torch::NoGradGuard no_grad;
  for (int64_t e = 0; e < moe.n_experts; ++e) {
    trunc_normal_(moe.experts->up[e], s.mlp_up);
    trunc_normal_(moe.experts->down[e], s.mlp_down);
  }
}

}  // namespace normlab
