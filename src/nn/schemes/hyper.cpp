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
// The connections are computed outside autocast, in the state's dtype, so that a bf16 run mixes
// its fp32 streams in fp32 (the branches still run in bf16).
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

#include <cmath>

#include "nn/schemes/schemes.h"

namespace normlab::schemes {
namespace {

class HyperConnectionImpl : public torch::nn::Module {
 public:
  HyperConnectionImpl(const ModelConfig& cfg, int64_t sublayer, torch::Device device)
      : n(cfg.hyper.n), tanh(cfg.hyper.tanh), eps(cfg.norm_eps) {
    const auto opts = torch::TensorOptions().device(device);
    const torch::Tensor eye = torch::eye(n, opts);
    static_alpha =
        register_parameter("static_alpha", torch::cat({eye.narrow(1, sublayer % n, 1), eye}, 1));
    static_beta = register_parameter("static_beta", torch::ones({n}, opts));
    if (cfg.hyper.dynamic) {
      w_alpha = register_parameter("w_alpha", torch::zeros({cfg.d_model, n + 1}, opts));
      w_beta = register_parameter("w_beta", torch::zeros({cfg.d_model}, opts));
      s_alpha = register_parameter("s_alpha", torch::full({1}, 0.01, opts));
      s_beta = register_parameter("s_beta", torch::full({1}, 0.01, opts));
    }
  }

  /// The width connection of state H: the branch input h, the carried streams H' and beta.
  struct Width {
    torch::Tensor h, carry, beta;
  };
  Width width(const torch::Tensor& H) const {
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCUDA);
    torch::Tensor alpha = static_alpha, beta = static_beta;
    if (w_alpha.defined()) {
      const torch::Tensor hb = torch::layer_norm(H, {H.size(-1)}, {}, {}, eps);
      torch::Tensor a = torch::matmul(hb, w_alpha.to(hb.scalar_type()));
      torch::Tensor b = torch::matmul(hb, w_beta.to(hb.scalar_type()));
      if (tanh) {
        a = a.tanh();
        b = b.tanh();
      }
      alpha = s_alpha * a + static_alpha;  // (B, T, n, n+1)
      beta = s_beta * b + static_beta;     // (B, T, n)
    }
    const torch::Tensor mix = torch::matmul(alpha.transpose(-1, -2).to(H.scalar_type()), H);
    return {mix.select(-2, 0), mix.narrow(-2, 1, n), beta.to(H.scalar_type())};
  }

  /// The depth connection: H = beta O + H'.
  static torch::Tensor depth(const Width& w, const torch::Tensor& o) {
    return w.beta.unsqueeze(-1) * o.unsqueeze(-2) + w.carry;
  }

  int64_t n;
  bool tanh;
  double eps;
  torch::Tensor static_alpha, static_beta, w_alpha, w_beta, s_alpha, s_beta;
};

class HyperBlock : public SchemeBlockImpl {
 public:
  HyperBlock(const ModelConfig& cfg, int64_t layer, torch::Device device)
      : attn_norm(add_norm(*this, "attn_norm", cfg, device)),
        mlp_norm(add_norm(*this, "mlp_norm", cfg, device)),
        f(add_branches(*this, cfg, layer, device)),
        attn_hc(register_module("attn_hc",
                                std::make_shared<HyperConnectionImpl>(cfg, 2 * layer, device))),
        mlp_hc(register_module("mlp_hc",
                               std::make_shared<HyperConnectionImpl>(cfg, 2 * layer + 1, device))) {
    if (cfg.hyper.out_std_mult == HyperOutStd::SqrtN) {
      const double m = std::sqrt(static_cast<double>(cfg.hyper.n));
      torch::NoGradGuard no_grad;
      f.attn->out->weight.mul_(m);
      f.mlp->down->weight.mul_(m);
    }
  }

  Streams forward(const Streams& s) override {
    auto w = attn_hc->width(s.x);
    torch::Tensor h = HyperConnectionImpl::depth(w, f.attn(attn_norm(w.h)));
    w = mlp_hc->width(h);
    h = HyperConnectionImpl::depth(w, f.mlp(mlp_norm(w.h)));
    return {h, {}};
  }

  void pretty_print(std::ostream& stream) const override {
    stream << "HyperBlock(n=" << attn_hc->n << (attn_hc->w_alpha.defined() ? ", dynamic" : "")
           << ")";
  }

  Norm attn_norm, mlp_norm;
  Branches f;
  std::shared_ptr<HyperConnectionImpl> attn_hc, mlp_hc;
};

}  // namespace

SchemeParts build_hyper(const ModelConfig& cfg, torch::nn::Module& owner, torch::Device device) {
  Norm final_norm = add_norm(owner, "final_norm", cfg, device);
  const int64_t n = cfg.hyper.n;
  auto enter = [n](const torch::Tensor& e) -> Streams {
    std::vector<int64_t> shape = e.sizes().vec();
    shape.insert(shape.end() - 1, n);
    return {e.unsqueeze(-2).expand(shape), {}};
  };
  auto exit = [final_norm](const Streams& s) mutable { return final_norm(s.x.sum(-2)); };
  return {make_blocks(cfg, device, block_of<HyperBlock>), enter, exit};
}

}  // namespace normlab::schemes
