// SiameseNorm x Hyper-Connections (model.siamese.hyper; docs/schemes.md): the Pre-Norm-like
// stream Y of siamese / siamese_hybrid as n hyper-streams. Its equivalences with plain SiameseNorm
// at the HC init (float64, the same weights), the options' effect, and the properties every
// scheme has (tests/unit/nn/test_schemes.cpp) for this variant: finite gradients to every
// parameter, causality, the KV cache, activation checkpointing and a finite-difference check of
// each block.
//
// Why it is SiameseNorm at init. With A_m = e_(k mod n), A_r = I and beta = 1 a sub-layer reads
// h = Y_k and writes Y_j = O + Y_j to every stream j: if all n streams hold plain SiameseNorm's Y
// before it, h is that Y, so the shared branch sees the plain model's input and returns its O,
// X gets the plain model's update, and every stream holds Y + O after it. The streams start equal
// (n copies of the embedding). In floating point every step is exact: the width connection
// multiplies by 1 and adds 0, beta O multiplies by 1, and the dynamic terms s tanh(LN(Y) W) are 0
// while W = 0. So X_L is the plain X_L, every Y stream is the plain Y_L, and the fusion reads
// N_y(sum_i Y_i) = N_y(n Y_L) = g n Y_L / sqrt(n^2 ms(Y_L) + eps) = g Y_L / sqrt(ms(Y_L) + eps/n^2)
// (scaling by n = 1, 2, 4 is exact in binary floating point): plain SiameseNorm with
// final_norm_y's eps divided by n^2, and for n = 1 plain SiameseNorm itself. Gradients agree as
// for hyper (test_hyper.cpp): the Y streams' gradients sum to the plain Y's at every depth, so
// every shared weight gets the plain model's gradient. Hence, in float64, 1e-10 relative (the
// autograd sums may be ordered differently; the forward is bitwise the same).
#include "normlab/config/config.h"
#include "normlab/nn/activation_checkpointing.h"
#include "normlab/nn/kv_cache.h"
#include "normlab/nn/model.h"
#include "normlab/nn/norm.h"
#include "normlab/nn/weights.h"
#include "support.h"

// Named (not anonymous): the test sources are compiled as unity files, beside test_hyper.cpp's
// helpers of the same names.
namespace normlab::siamese_hyper_test {

using normlab::test::close;

constexpr double kTol = 1e-10;  // float64, the same numbers in another order of operations

ModelConfig shc_config(Scheme s, int64_t n, bool dynamic) {
  ModelConfig c = test::tiny_config(s);
  c.n_layers = 3;  // 6 sub-layers: the one-hot A_m wraps around the streams for n = 4
  c.siamese.hyper.n = n;
  c.siamese.hyper.dynamic = dynamic;
  return c;
}

bool is_hc(const std::string& name) { return name.find("_hc.") != std::string::npos; }

// Plain SiameseNorm (siamese.hyper.n = 0) in float64 with random norm gains and c1, and the
// SiameseNorm x HC model of `cfg` with the same shared weights, its connections at their init.
struct Pair {
  DecoderLM plain{nullptr}, hyper{nullptr};
};
Pair same_weights(const ModelConfig& cfg) {
  ModelConfig pcfg = cfg;
  pcfg.siamese.hyper.n = 0;
  torch::manual_seed(5);
  Pair p{DecoderLM(pcfg), DecoderLM(cfg)};
  p.plain->to(torch::kDouble);
  p.hyper->to(torch::kDouble);
  torch::NoGradGuard no_grad;
  for (auto& w : p.plain->named_parameters())
    if (w.value().dim() == 1) w.value().uniform_(0.5, 1.5);
  TensorDict mapped = weights_of(*p.plain);
  for (const auto& [name, t] : weights_of(*p.hyper))
    if (is_hc(name)) mapped[name] = t;
  load_weights(*p.hyper, mapped, "plain SiameseNorm weights");  // strict: every name once
  return p;
}

torch::Tensor tokens_for(const ModelConfig& cfg) {
  torch::manual_seed(99);
  return torch::randint(cfg.vocab_size, {2, 7}, torch::kLong);
}

using test::loss_and_grads;
using test::LossAndGrads;

// The largest relative difference of the logits and of every gradient of the plain model.
double worst_difference(const LossAndGrads& hyper, const LossAndGrads& plain) {
  double worst = test::max_rel_error(hyper.logits, plain.logits);
  for (const auto& [name, g] : plain.grads)
    worst = std::max(worst, test::max_rel_error(hyper.grads.at(name), g));
  return worst;
}

void set_final_y_eps(DecoderLM& m, double eps) {
  auto norm = std::dynamic_pointer_cast<NormImpl>(m->named_children()["final_norm_y"]);
  ASSERT_TRUE(norm);
  norm->options.eps(eps);
}

const Scheme kSchemes[] = {Scheme::Siamese, Scheme::SiameseHybrid};

// The requirement: n = 1, static, at init equals siamese / siamese_hybrid on the same weights
// (logits and every shared gradient; the forward is bitwise equal, see the top).
TEST(SiameseHyper, OneStreamStaticAtInitIsPlainSiameseNorm) {
  for (const Scheme s : kSchemes) {
    SCOPED_TRACE(enum_name(s));
    Pair p = same_weights(shc_config(s, 1, false));
    const torch::Tensor tokens = tokens_for(p.plain->config);
    const LossAndGrads h = loss_and_grads(p.hyper, tokens), r = loss_and_grads(p.plain, tokens);
    EXPECT_LE(worst_difference(h, r), kTol);
    EXPECT_TRUE(torch::equal(h.logits, r.logits));
  }
}

// n = 1, 2, 4, SHC and DHC: plain SiameseNorm whose final_norm_y has eps / n^2.
TEST(SiameseHyper, AtInitIsSiameseNormWithFinalYEpsOverNSquared) {
  for (const Scheme s : kSchemes)
    for (const bool dynamic : {false, true})
      for (const int64_t n : {1, 2, 4}) {
        SCOPED_TRACE(std::string(enum_name(s)) + " n=" + std::to_string(n) +
                     (dynamic ? " DHC" : " SHC"));
        const ModelConfig cfg = shc_config(s, n, dynamic);
        Pair p = same_weights(cfg);
        set_final_y_eps(p.plain, cfg.norm_eps / static_cast<double>(n * n));
        const torch::Tensor tokens = tokens_for(cfg);
        const LossAndGrads h = loss_and_grads(p.hyper, tokens), r = loss_and_grads(p.plain, tokens);
        EXPECT_LE(worst_difference(h, r), kTol);
        if (n > 1) {  // and the eps term shows against plain SiameseNorm's own eps
          set_final_y_eps(p.plain, cfg.norm_eps);
          torch::NoGradGuard no_grad;
          EXPECT_GT(test::max_rel_error(p.hyper->forward(tokens), p.plain->forward(tokens)),
                    10 * kTol);
        }
      }
}

// The check can fail: A_r = I + 1e-3 on one sub-layer breaks it by orders of magnitude.
TEST(SiameseHyper, EquivalenceCheckCatchesAChangedInit) {
  for (const Scheme s : kSchemes) {
    SCOPED_TRACE(enum_name(s));
    Pair p = same_weights(shc_config(s, 1, false));
    {
      torch::NoGradGuard no_grad;
      p.hyper->named_parameters()["blocks.1.mlp_hc.static_alpha"].narrow(1, 1, 1).add_(1e-3);
    }
    const torch::Tensor tokens = tokens_for(p.plain->config);
    EXPECT_GT(worst_difference(loss_and_grads(p.hyper, tokens), loss_and_grads(p.plain, tokens)),
              1e4 * kTol);
  }
}

// mHC on Y at its init (H_pre = 1/2, H_post = 1, H_res = 1/n) keeps the streams equal and feeds
// N_y (n/2) Y: with eps = 0 every norm is scale-invariant, so it is plain SiameseNorm (eps = 0).
TEST(SiameseHyper, MhcAtInitWithZeroEpsIsPlainSiameseNorm) {
  for (const Scheme s : kSchemes)
    for (const int64_t n : {1, 2, 4}) {
      SCOPED_TRACE(std::string(enum_name(s)) + " n=" + std::to_string(n));
      ModelConfig cfg = shc_config(s, n, true);
      cfg.siamese.hyper.variant = HyperVariant::Mhc;
      cfg.norm_eps = 0.0;
      Pair p = same_weights(cfg);
      const torch::Tensor tokens = tokens_for(cfg);
      EXPECT_LE(worst_difference(loss_and_grads(p.hyper, tokens), loss_and_grads(p.plain, tokens)),
                kTol);
    }
}

// The HC layers sit on Y only: named blocks.<l>.{attn,mlp}_hc like hyper's, at the HC paper's
// init, decayed like hyper's (W only), and out_std_mult scales the shared output projections.
TEST(SiameseHyper, ConnectionsInitDecayAndOutStd) {
  ModelConfig cfg = shc_config(Scheme::SiameseHybrid, 2, true);
  torch::manual_seed(3);
  DecoderLM a(cfg);
  const auto pa = a->named_parameters();
  int hc = 0;
  for (const auto& q : pa) {
    if (!is_hc(q.key())) continue;
    ++hc;
    const bool w = q.key().find(".w_") != std::string::npos;
    EXPECT_EQ(decays(q.key(), q.value().dim(), OptimizerConfig{}), w) << q.key();
  }
  EXPECT_EQ(hc, 3 * 2 * 6);  // 3 blocks x 2 HC layers x (static alpha, beta; W_a, W_b; s_a, s_b)
  torch::Tensor alpha = torch::zeros({2, 3});
  alpha[1][0] = 1.0;  // sub-layer 2 * 2 + 1 = 5 reads stream 5 mod 2 = 1
  alpha.narrow(1, 1, 2).copy_(torch::eye(2));
  EXPECT_TRUE(torch::equal(pa["blocks.2.mlp_hc.static_alpha"], alpha));
  cfg.siamese.hyper.out_std_mult = HyperOutStd::SqrtN;
  torch::manual_seed(3);
  DecoderLM b(cfg);
  for (const auto& q : b->named_parameters()) {
    const bool out = q.key().find("attn.out.") != std::string::npos ||
                     q.key().find("mlp.down.") != std::string::npos;
    EXPECT_TRUE(close(q.value(), pa[q.key()] * (out ? std::sqrt(2.0) : 1.0), 1e-7)) << q.key();
  }
  cfg.siamese.hyper.n = 0;  // off: plain SiameseNorm, no HC parameter
  for (const auto& q : DecoderLM(cfg)->named_parameters()) EXPECT_FALSE(is_hc(q.key()));
}

// The scheme-wide properties for this variant (DHC and mHC at n = 2, away from the init): every
// parameter gets a finite, nonzero gradient; causality; the KV cache gives the full forward's
// logits; activation checkpointing the same gradients.
TEST(SiameseHyper, GradientsCausalityKvCacheAndActivationCheckpointing) {
  for (const Scheme s : kSchemes)
    for (const HyperVariant v : {HyperVariant::Hc, HyperVariant::Mhc}) {
      SCOPED_TRACE(std::string(enum_name(s)) + " " + std::string(enum_name(v)));
      ModelConfig cfg = shc_config(s, 2, true);
      cfg.siamese.hyper.variant = v;
      torch::manual_seed(2);
      DecoderLM m(cfg);
      {
        torch::NoGradGuard no_grad;
        for (auto& p : m->parameters()) p.add_(0.1 * torch::randn_like(p));
      }
      const torch::Tensor tokens = tokens_for(cfg);
      const LossAndGrads plain = loss_and_grads(m, tokens);
      for (const auto& [name, g] : plain.grads) {
        EXPECT_TRUE(torch::isfinite(g).all().item<bool>()) << name;
        // mHC's H_res parameters get rounding noise only where H_res cannot matter (the first
        // sub-layer's streams are equal, the last one's column sums are 1; hyper_ref.py)
        const bool res = name.find("_res") != std::string::npos;
        if (!res) {
          EXPECT_GT(g.abs().sum().item<double>(), 0.0) << name << " gets no gradient";
        }
      }
      torch::Tensor full, pieces, changed;
      {
        torch::NoGradGuard no_grad;
        full = m->forward(tokens);
        torch::Tensor t2 = tokens.clone();
        t2.index_put_({0, 6}, (t2[0][6].item<int64_t>() + 1) % cfg.vocab_size);
        changed = m->forward(t2);
        KVCache cache(*m, tokens.size(0), tokens.size(1), torch::kCPU);
        KVCacheScope scope(*m, cache);
        pieces = torch::cat({m->forward(tokens.narrow(1, 0, 4)), m->forward(tokens.narrow(1, 4, 1)),
                             m->forward(tokens.narrow(1, 5, 2))},
                            1);
      }
      EXPECT_TRUE(torch::allclose(changed.narrow(1, 0, 6), full.narrow(1, 0, 6)));
      EXPECT_FALSE(torch::allclose(changed.select(1, 6), full.select(1, 6)));
      EXPECT_TRUE(close(pieces, full, 1e-5));
      ActivationCheckpointedBlocks hooks(1);
      m->hooks = &hooks;
      const LossAndGrads ckpt = loss_and_grads(m, tokens);
      m->hooks = nullptr;
      for (const auto& [name, g] : plain.grads)
        EXPECT_TRUE(close(ckpt.grads.at(name), g, 1e-6)) << name;
    }
}

// Each block in float64: autograd's gradients with respect to X, the (B, T, n, C) hyper-streams
// of Y and every parameter agree with central differences along random directions.
TEST(SiameseHyper, BlockGradientsMatchFiniteDifferences) {
  for (const Scheme s : kSchemes) {
    ModelConfig cfg = shc_config(s, 2, true);
    cfg.d_model = 8;
    cfg.n_heads = 2;
    cfg.n_kv_heads = 1;
    cfg.d_ff = 8;
    cfg.n_layers = 2;
    torch::manual_seed(11);
    DecoderLM model(cfg);
    model->to(torch::kDouble);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : model->parameters()) p.add_(0.01 * torch::randn_like(p));
    }
    const auto opts = torch::TensorOptions().dtype(torch::kDouble);
    const Streams start = model->enter(torch::zeros({1, 3, cfg.d_model}, opts));
    ASSERT_EQ(start.y.sizes(), (std::vector<int64_t>{1, 3, 2, cfg.d_model}));
    for (size_t l = 0; l < model->scheme_blocks.size(); ++l) {
      SCOPED_TRACE(std::string(enum_name(s)) + " block " + std::to_string(l));
      auto& block = *model->scheme_blocks[l];
      torch::Tensor x = torch::randn(start.x.sizes(), opts).requires_grad_();
      torch::Tensor y = torch::randn(start.y.sizes(), opts).requires_grad_();
      const torch::Tensor rx = torch::randn(start.x.sizes(), opts),
                          ry = torch::randn(start.y.sizes(), opts);
      auto objective = [&] {
        const Streams out = block.forward({x, y});
        return (out.x * rx).sum() + (out.y * ry).sum();
      };
      std::vector<torch::Tensor> inputs = {x, y};
      for (auto& p : block.parameters()) inputs.push_back(p);
      const auto grads = torch::autograd::grad({objective()}, inputs);
      for (size_t i = 0; i < inputs.size(); ++i)
        for (int k = 0; k < 2; ++k) {
          const torch::Tensor v = torch::randn_like(inputs[i]);
          const double numeric = test::directional_derivative(objective, inputs[i].detach(), v);
          const double analytic = (grads[i] * v).sum().item<double>();
          EXPECT_NEAR(analytic, numeric, 1e-6 * std::max(1.0, std::abs(numeric))) << "input " << i;
        }
    }
  }
}

}  // namespace normlab::siamese_hyper_test
