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
// The connections are computed outside autocast, in the state's dtype, so that a bf16 run mixes
// its fp32 streams in fp32 (the branches still run in bf16).
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

#include <cmath>

#include "nn/schemes/schemes.h"

namespace normlab::schemes {
namespace {

// One sub-layer's connections: width() gives the branch input h, the carried streams H' and
// the depth weights beta of the state H; depth() adds the branch output: H = beta O + H'.
class ConnectionImpl : public torch::nn::Module {
 public:
  struct Width {
    torch::Tensor h, carry, beta;
  };
  virtual Width width(const torch::Tensor& H) const = 0;

  static torch::Tensor depth(const Width& w, const torch::Tensor& o) {
    return w.beta.unsqueeze(-1) * o.unsqueeze(-2) + w.carry;
  }
};

class HyperConnectionImpl : public ConnectionImpl {
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

  Width width(const torch::Tensor& H) const override {
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

  int64_t n;
  bool tanh;
  double eps;
  torch::Tensor static_alpha, static_beta, w_alpha, w_beta, s_alpha, s_beta;
};

class ManifoldConnectionImpl : public ConnectionImpl {
 public:
  static constexpr int kSinkhornIterations = 20;

  ManifoldConnectionImpl(const ModelConfig& cfg, torch::Device device)
      : n(cfg.hyper.n), eps(cfg.norm_eps) {
    const auto opts = torch::TensorOptions().device(device);
    phi = register_parameter("phi", torch::zeros({n * cfg.d_model, n * n + 2 * n}, opts));
    b_pre = register_parameter("b_pre", torch::zeros({n}, opts));
    b_post = register_parameter("b_post", torch::zeros({n}, opts));
    b_res = register_parameter("b_res", torch::zeros({n, n}, opts));
    a_pre = register_parameter("a_pre", torch::full({1}, 0.01, opts));
    a_post = register_parameter("a_post", torch::full({1}, 0.01, opts));
    a_res = register_parameter("a_res", torch::full({1}, 0.01, opts));
  }

  Width width(const torch::Tensor& H) const override {
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCUDA);
    const auto dt = H.scalar_type();
    const torch::Tensor v = H.flatten(-2);  // vec(H): (B, T, n C)
    const torch::Tensor xt = v * torch::rsqrt(v.pow(2).mean(-1, /*keepdim=*/true) + eps);
    const torch::Tensor p = torch::matmul(xt, phi.to(dt));  // (B, T, n^2 + 2n)
    const torch::Tensor pre = torch::sigmoid(a_pre * p.narrow(-1, 0, n) + b_pre);
    const torch::Tensor post = 2.0 * torch::sigmoid(a_post * p.narrow(-1, n, n) + b_post);
    std::vector<int64_t> square = p.sizes().vec();
    square.back() = n;
    square.push_back(n);
    torch::Tensor res = torch::exp(a_res * p.narrow(-1, 2 * n, n * n).reshape(square) + b_res);
    for (int i = 0; i < kSinkhornIterations; ++i) {
      res = res / res.sum(-1, /*keepdim=*/true);  // rows
      res = res / res.sum(-2, /*keepdim=*/true);  // columns
    }
    const torch::Tensor h = torch::matmul(pre.to(dt).unsqueeze(-2), H).squeeze(-2);
    return {h, torch::matmul(res.to(dt), H), post.to(dt)};
  }

  int64_t n;
  double eps;
  torch::Tensor phi, b_pre, b_post, b_res, a_pre, a_post, a_res;
};

std::shared_ptr<ConnectionImpl> make_connection(const ModelConfig& cfg, int64_t sublayer,
                                                torch::Device device) {
  if (cfg.hyper.variant == HyperVariant::Mhc)
    return std::make_shared<ManifoldConnectionImpl>(cfg, device);
  return std::make_shared<HyperConnectionImpl>(cfg, sublayer, device);
}

class HyperBlock : public SchemeBlockImpl {
 public:
  HyperBlock(const ModelConfig& cfg, int64_t layer, torch::Device device)
      : attn_norm(add_norm(*this, "attn_norm", cfg, device)),
        mlp_norm(add_norm(*this, "mlp_norm", cfg, device)),
        f(add_branches(*this, cfg, layer, device)),
        attn_hc(register_module("attn_hc", make_connection(cfg, 2 * layer, device))),
        mlp_hc(register_module("mlp_hc", make_connection(cfg, 2 * layer + 1, device))),
        n(cfg.hyper.n),
        variant(cfg.hyper.variant) {
    if (cfg.hyper.out_std_mult == HyperOutStd::SqrtN) {
      const double m = std::sqrt(static_cast<double>(cfg.hyper.n));
      torch::NoGradGuard no_grad;
      f.attn->out->weight.mul_(m);
      f.mlp.scale_output_(m);
    }
  }

  Streams forward(const Streams& s) override {
    auto w = attn_hc->width(s.x);
    torch::Tensor h = ConnectionImpl::depth(w, f.attn(attn_norm(w.h)));
    w = mlp_hc->width(h);
    h = ConnectionImpl::depth(w, f.mlp(mlp_norm(w.h)));
    return {h, {}};
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
  auto enter = [n](const torch::Tensor& e) -> Streams {
    std::vector<int64_t> shape = e.sizes().vec();
    shape.insert(shape.end() - 1, n);
    return {e.unsqueeze(-2).expand(shape), {}};
  };
  auto exit = [final_norm](const Streams& s) mutable { return final_norm(s.x.sum(-2)); };
  return {make_blocks(cfg, device, block_of<HyperBlock>), enter, exit};
}

}  // namespace normlab::schemes
