// Hyper-Connections (Zhu et al. 2025, "Hyper-Connections", arXiv 2409.19606), the packed form
// of the paper's Algorithm 2 around the Pre-Norm block. The residual state is n streams,
// H (B, T, n, C). Each sub-layer k (attention k = 2l, MLP k = 2l + 1) is one HC layer with the
// width connection alpha = [A_m | A_r] (n x (n+1)) and the depth connection beta (n):
//   mix = alpha^T H           (B, T, n+1, C): h = mix_0 = A_m^T H, H' = mix_1..n = A_r^T H
//   O   = F_k(N_k(h))         the Pre-Norm branch with its own norm (attn_norm, mlp_norm)
//   H   = beta O + H'         H_j = beta_j O + sum_i A_r[i, j] H_i
// Dynamic (DHC), with Hb = LN(H) over C per stream and token (no gain, no bias, model.norm_eps):
//   alpha(H) = s_alpha tanh(Hb W_alpha) + static_alpha     (B, T, n, n+1)
//   beta(H)  = s_beta  tanh(Hb W_beta)  + static_beta      (B, T, n)
// enter: H = n copies of the embedding;  end: Z = N_f(sum_i H_i).
// Init (the paper's Eq. 14): static_beta = 1, A_m = e_(k mod n), A_r = I, W = 0, s = 0.01. Every
// stream then carries the Pre-Norm residual x, and the model equals Pre-Norm up to the final
// norm's eps: N_f(n x) = x / sqrt(ms(x) + eps / n^2) (docs/schemes.md).
// mHC (model.hyper.variant: mhc; Xie et al. 2025, "mHC: Manifold-Constrained Hyper-Connections",
// arXiv 2512.24880, Eqs. 7-8), per sub-layer, with xt = RMSNorm(vec(H)) over the n C values of a
// token (no gain, eps model.norm_eps) and one projection phi (n C x (n^2 + 2n)) = [pre|post|res]:
//   H_pre  = sigmoid(a_pre xt phi_pre + b_pre)                           (n)
//   H_post = 2 sigmoid(a_post xt phi_post + b_post)                      (n)
//   H_res  = Sinkhorn-Knopp(exp(a_res mat(xt phi_res) + b_res)), 20 iterations of row then
//            column normalisation (n x n, doubly stochastic)
//   h = sum_i H_pre[i] H_i;  O = F_k(N_k(h));  H_j = sum_i H_res[j, i] H_i + H_post[j] O
// Init (ours; the paper does not state it): phi = 0, b = 0, a = 0.01, so H_pre = 1/2, H_post = 1,
// H_res = 1/n: the streams stay equal and the model is Pre-Norm with the branch input scaled by
// n/2, which the branch norm undoes up to its eps.
// The connections (hyper_connection.cpp) are computed outside autocast, in the state's dtype, so
// that a bf16 run mixes its fp32 streams in fp32 (the branches still run in bf16).
#include <torch/torch.h>

#include "nn/schemes/hyper_connection.h"
#include "nn/schemes/schemes.h"

namespace normlab::schemes {
namespace {

class HyperBlock : public SchemeBlockImpl {
 public:
  HyperBlock(const ModelConfig& cfg, int64_t layer, torch::Device device)
      : attn_norm(add_norm(*this, "attn_norm", cfg, device)),
        mlp_norm(add_norm(*this, "mlp_norm", cfg, device)),
        f(add_branches(*this, cfg, layer, device)),
        attn_hc(register_module("attn_hc", connection(cfg, 2 * layer, device))),
        mlp_hc(register_module("mlp_hc", connection(cfg, 2 * layer + 1, device))),
        n(cfg.hyper.n),
        variant(cfg.hyper.variant) {
    scale_hyper_outputs(f, cfg.hyper);
  }

  Streams forward(const Streams& s) override {
    auto w = attn_hc->width(s.x);
    torch::Tensor h = ConnectionImpl::depth(w, f.attn(attn_norm(w.h)));
    w = mlp_hc->width(h);
    h = ConnectionImpl::depth(w, f.mlp(mlp_norm(w.h)));
    return {h, {}};
  }

  static std::shared_ptr<ConnectionImpl> connection(const ModelConfig& cfg, int64_t sublayer,
                                                    torch::Device device) {
    return make_connection(cfg.hyper, cfg.d_model, cfg.norm_eps, sublayer, device);
  }

  void pretty_print(std::ostream& stream) const override {
    stream << "HyperBlock(" << enum_name(variant) << ", n=" << n << ")";
  }

  Norm attn_norm, mlp_norm;
  Branches f;
  std::shared_ptr<ConnectionImpl> attn_hc, mlp_hc;
  int64_t n;
  HyperVariant variant;
};

}  // namespace

SchemeParts build_hyper(const ModelConfig& cfg, torch::nn::Module& owner, torch::Device device) {
  Norm final_norm = add_norm(owner, "final_norm", cfg, device);
  const int64_t n = cfg.hyper.n;
  auto enter = [n](const torch::Tensor& e) -> Streams { return {hyper_copies(e, n), {}}; };
  auto exit = [final_norm](const Streams& s) mutable { return final_norm(s.x.sum(-2)); };
  return {make_blocks(cfg, device, block_of<HyperBlock>), enter, exit};
}

}  // namespace normlab::schemes
