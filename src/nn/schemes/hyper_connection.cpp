// Hyper-Connections layers (hyper_connection.h): HC (Zhu et al. 2025, arXiv 2409.19606, the
// packed form of Algorithm 2, static or dynamic) and mHC (Xie et al. 2025, arXiv 2512.24880,
// Eqs. 7-8); the equations are in hyper.cpp's header. Used by hyper.cpp and by SiameseNorm's
// Y stream (siamese.cpp, siamese_hybrid.cpp).
// The connections are computed outside autocast (CPU and CUDA), in the state's dtype, so that a
// bf16 run mixes its fp32 streams in fp32 (the branches still run in bf16).
#include "nn/schemes/hyper_connection.h"

#include <torch/torch.h>

#include <cmath>

#include "normlab/nn/autocast.h"

namespace normlab::schemes {
namespace {

class HyperConnectionImpl : public ConnectionImpl {
 public:
  HyperConnectionImpl(const HyperOptions& o, int64_t d_model, double eps_, int64_t sublayer,
                      torch::Device device)
      : n(o.n), tanh(o.tanh), eps(eps_) {
    const auto opts = torch::TensorOptions().device(device);
    const torch::Tensor eye = torch::eye(n, opts);
    static_alpha =
        register_parameter("static_alpha", torch::cat({eye.narrow(1, sublayer % n, 1), eye}, 1));
    static_beta = register_parameter("static_beta", torch::ones({n}, opts));
    if (o.dynamic) {
      w_alpha = register_parameter("w_alpha", torch::zeros({d_model, n + 1}, opts));
      w_beta = register_parameter("w_beta", torch::zeros({d_model}, opts));
      s_alpha = register_parameter("s_alpha", torch::full({1}, 0.01, opts));
      s_beta = register_parameter("s_beta", torch::full({1}, 0.01, opts));
    }
  }

  Width width(const torch::Tensor& H) const override {
    const NoAutocast fp32;
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

  ManifoldConnectionImpl(const HyperOptions& o, int64_t d_model, double eps_, torch::Device device)
      : n(o.n), eps(eps_) {
    const auto opts = torch::TensorOptions().device(device);
    phi = register_parameter("phi", torch::zeros({n * d_model, n * n + 2 * n}, opts));
    b_pre = register_parameter("b_pre", torch::zeros({n}, opts));
    b_post = register_parameter("b_post", torch::zeros({n}, opts));
    b_res = register_parameter("b_res", torch::zeros({n, n}, opts));
    a_pre = register_parameter("a_pre", torch::full({1}, 0.01, opts));
    a_post = register_parameter("a_post", torch::full({1}, 0.01, opts));
    a_res = register_parameter("a_res", torch::full({1}, 0.01, opts));
  }

  Width width(const torch::Tensor& H) const override {
    const NoAutocast fp32;
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

}  // namespace

std::shared_ptr<ConnectionImpl> make_connection(const HyperOptions& o, int64_t d_model, double eps,
                                                int64_t sublayer, torch::Device device) {
  if (o.variant == HyperVariant::Mhc)
    return std::make_shared<ManifoldConnectionImpl>(o, d_model, eps, device);
  return std::make_shared<HyperConnectionImpl>(o, d_model, eps, sublayer, device);
}

torch::Tensor hyper_copies(const torch::Tensor& e, int64_t n) {
  std::vector<int64_t> shape = e.sizes().vec();
  shape.insert(shape.end() - 1, n);
  return e.unsqueeze(-2).expand(shape);
}

void scale_hyper_outputs(Branches& f, const HyperOptions& o) {
  if (o.out_std_mult != HyperOutStd::SqrtN) return;
  const double m = std::sqrt(static_cast<double>(o.n));
  torch::NoGradGuard no_grad;
  f.attn->out->weight.mul_(m);
  f.mlp.scale_output_(m);
}

std::shared_ptr<ConnectionImpl> add_siamese_connection(torch::nn::Module& m,
                                                       const std::string& name,
                                                       const ModelConfig& cfg, int64_t sublayer,
                                                       torch::Device device) {
  if (!cfg.siamese.hyper.enabled()) return nullptr;
  return m.register_module(
      name, make_connection(cfg.siamese.hyper, cfg.d_model, cfg.norm_eps, sublayer, device));
}

ConnectionImpl::Width read_y(const std::shared_ptr<ConnectionImpl>& hc, const torch::Tensor& y) {
  return hc ? hc->width(y) : ConnectionImpl::Width{y, y, {}};
}

torch::Tensor write_y(const ConnectionImpl::Width& w, const torch::Tensor& o) {
  return w.beta.defined() ? ConnectionImpl::depth(w, o) : w.carry + o;
}

}  // namespace normlab::schemes
