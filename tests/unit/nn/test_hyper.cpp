// Hyper-Connections (src/nn/schemes/hyper.cpp): the paper's init, its equivalence with Pre-Norm
// at init on the same weights (float64), the weight-decay groups and the options' errors.
//
// Why HC at init is Pre-Norm. With A_m = e_(k mod n), A_r = I and beta = 1, a sub-layer reads
// h = H_k and writes H_j = O + H_j to every stream j: if all n streams hold the Pre-Norm residual
// x before it, they all hold x + F(N(x)) after it, and they start equal (n copies of the
// embedding). In floating point every step is exact: A_r^T H multiplies by 1 and adds 0, A_m^T H
// picks one stream the same way, and beta O multiplies by 1. The dynamic terms add
// s tanh(LN(H) W) = 0 exactly while W = 0. So at the end every stream is x_L and
//   Z = N_f(sum_i H_i) = N_f(n x_L) = g * n x_L / sqrt(n^2 ms(x_L) + eps) = g * x_L / sqrt(ms(x_L)
//   + eps / n^2),
// which is Pre-Norm's final norm with eps replaced by eps / n^2 (the sum of n equal streams is
// n x_L exactly for n = 1 and 2, and within one rounding for n = 4). Gradients agree too: at the
// end each stream gets 1/n of Pre-Norm's dL/dx, the branch output O is written to n streams and so
// collects their sum, and by induction the sum of the stream gradients is Pre-Norm's dL/dx at every
// depth (the branch's own term lands on stream k only): every shared weight gets Pre-Norm's
// gradient. Hence, in float64 (only the order of operations differs, so 1e-10 relative):
//   n = 1: HC == Pre-Norm (eps / 1 = eps), logits and every shared gradient;
//   n > 1: HC == Pre-Norm with final-norm eps / n^2, logits and every shared gradient; and
//          against Pre-Norm itself each position's logits are scaled by exactly
//          r = sqrt((ms(x_L) + eps) / (ms(x_L) + eps / n^2)), so
//          |logits_HC - logits_pre| <= (r - 1) |logits_pre| <= eps (1 - 1/n^2) / (2 ms(x_L))
//          |logits_pre|.
#include "normlab/config/config.h"
#include "normlab/nn/activation_checkpointing.h"
#include "normlab/nn/kv_cache.h"
#include "normlab/nn/model.h"
#include "normlab/nn/norm.h"
#include "normlab/nn/weights.h"
#include "normlab/testing/equivalence.h"
#include "normlab/util/error.h"
#include "support.h"

using namespace normlab;
using normlab::test::close;

namespace {

constexpr double kTol = 1e-10;  // float64, the same numbers in another order of operations

ModelConfig hyper_config(int64_t n, bool dynamic) {
  ModelConfig c = test::tiny_config(Scheme::Hyper);
  c.n_layers = 3;  // 6 sub-layers: the one-hot A_m wraps around the streams for n = 4
  c.hyper.n = n;
  c.hyper.dynamic = dynamic;
  return c;
}

bool is_hc(const std::string& name) { return name.find("_hc.") != std::string::npos; }

// Pre-Norm (A, the same config with scheme pre_norm) in float64 with random norm gains (so that
// every gain matters), and the hyper model of `hcfg` (B) on its weights with its own connections
// held at their init (normlab/testing/equivalence.h).
equivalence::ModelPair same_weights(const ModelConfig& hcfg) {
  ModelConfig pcfg = hcfg;
  pcfg.scheme = Scheme::PreNorm;
  equivalence::WeightMap map;
  map.fix_b("blocks.*.*_hc.*", equivalence::kInit);
  return equivalence::build_pair(pcfg, hcfg, map, {5});
}

torch::Tensor tokens_for(const ModelConfig& cfg) {
  torch::manual_seed(99);
  return torch::randint(cfg.vocab_size, {2, 7}, torch::kLong);
}

}  // namespace

TEST(Hyper, InitIsThePapers) {
  ModelConfig cfg = hyper_config(4, true);
  DecoderLM m(cfg);
  const auto p = m->named_parameters();
  for (int64_t l = 0; l < cfg.n_layers; ++l)
    for (int64_t s = 0; s < 2; ++s) {
      const std::string b = "blocks." + std::to_string(l) + (s == 0 ? ".attn_hc." : ".mlp_hc.");
      const int64_t k = 2 * l + s, n = cfg.hyper.n;
      torch::Tensor alpha = torch::zeros({n, n + 1});
      alpha[k % n][0] = 1.0;  // A_m = e_(k mod n): sub-layer k reads stream k mod n
      alpha.narrow(1, 1, n).copy_(torch::eye(n));  // A_r = I
      EXPECT_TRUE(torch::equal(p[b + "static_alpha"], alpha)) << b;
      EXPECT_TRUE(torch::equal(p[b + "static_beta"], torch::ones({n}))) << b;
      EXPECT_TRUE(torch::equal(p[b + "w_alpha"], torch::zeros({cfg.d_model, n + 1}))) << b;
      EXPECT_TRUE(torch::equal(p[b + "w_beta"], torch::zeros({cfg.d_model}))) << b;
      EXPECT_TRUE(torch::equal(p[b + "s_alpha"], torch::full({1}, 0.01))) << b;
      EXPECT_TRUE(torch::equal(p[b + "s_beta"], torch::full({1}, 0.01))) << b;
    }
  cfg.hyper.dynamic = false;
  for (const auto& q : DecoderLM(cfg)->named_parameters())
    if (is_hc(q.key())) {
      EXPECT_TRUE(q.key().find("static_") != std::string::npos) << q.key() << " in SHC";
    }
}

TEST(Hyper, OutStdMultScalesTheOutputProjectionsBySqrtN) {
  ModelConfig cfg = hyper_config(4, true);
  cfg.hyper.out_std_mult = HyperOutStd::One;
  torch::manual_seed(3);
  DecoderLM a(cfg);
  cfg.hyper.out_std_mult = HyperOutStd::SqrtN;
  torch::manual_seed(3);
  DecoderLM b(cfg);
  const auto pa = a->named_parameters(), pb = b->named_parameters();
  for (const auto& q : pa) {
    const bool out = q.key().find("attn.out.") != std::string::npos ||
                     q.key().find("mlp.down.") != std::string::npos;
    EXPECT_TRUE(close(pb[q.key()], q.value() * (out ? 2.0 : 1.0), 1e-7)) << q.key();
  }
}

// n = 1: eps / n^2 = eps, so HC is Pre-Norm itself.
TEST(Hyper, OneStreamStaticAtInitIsPreNorm) {
  equivalence::ModelPair p = same_weights(hyper_config(1, false));
  const auto report = equivalence::compare(p, {5});
  EXPECT_LE(report.worst(), kTol) << report;
  EXPECT_EQ(report.gradients.size(), weights_of(*p.a).size());  // every Pre-Norm gradient
}

// Sets the eps of the final norm of `m` alone.
void set_final_eps(DecoderLM& m, double eps) {
  auto norm = std::dynamic_pointer_cast<NormImpl>(m->named_children()["final_norm"]);
  ASSERT_TRUE(norm);
  norm->options.eps(eps);
}

// n = 1, 2, 4, static and dynamic: Pre-Norm whose final norm has eps / n^2, exactly.
TEST(Hyper, AtInitIsPreNormWithTheFinalEpsOverNSquared) {
  for (const bool dynamic : {false, true})
    for (const int64_t n : {1, 2, 4}) {
      SCOPED_TRACE("n=" + std::to_string(n) + (dynamic ? " DHC" : " SHC"));
      const ModelConfig cfg = hyper_config(n, dynamic);
      equivalence::ModelPair p = same_weights(cfg);
      set_final_eps(p.a, cfg.norm_eps / static_cast<double>(n * n));
      const auto report = equivalence::compare(p, {5});
      EXPECT_LE(report.worst(), kTol) << report;
      if (dynamic) {  // the scales see tanh(0) = 0: their gradient is exactly 0 at init
        EXPECT_EQ(
            p.b->named_parameters()["blocks.0.attn_hc.s_alpha"].grad().abs().max().item<double>(),
            0.0);
      }
    }
}

// Against Pre-Norm itself (the same eps): each position's logits are Pre-Norm's times
// r = sqrt((ms + eps) / (ms + eps / n^2)), ms = mean(x_L^2) of Pre-Norm's last residual, so the
// difference is within the bound eps (1 - 1/n^2) / (2 ms) of the logits' size; and it is there
// (the eps term is 1e-4 of the logits here, far above float64 rounding).
TEST(Hyper, AtInitDiffersFromPreNormOnlyByTheFinalNormsEps) {
  for (const int64_t n : {2, 4}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const ModelConfig cfg = hyper_config(n, false);
    equivalence::ModelPair p = same_weights(cfg);
    const torch::Tensor tokens = tokens_for(cfg);
    torch::NoGradGuard no_grad;
    torch::Tensor x_last;
    const torch::Tensor pre =
        p.a->forward(tokens, [&](std::string_view name, int64_t l, const torch::Tensor& t) {
          if (name == "x" && l == cfg.n_layers - 1) x_last = t;
        });
    const torch::Tensor hyper = p.b->forward(tokens);
    const double eps = cfg.norm_eps, n2 = static_cast<double>(n * n);
    const torch::Tensor ms = x_last.pow(2).mean(-1, /*keepdim=*/true);  // (B, T, 1)
    const torch::Tensor r = ((ms + eps) / (ms + eps / n2)).sqrt();
    EXPECT_TRUE(close(hyper, pre * r, kTol));
    // (r - 1) <= (r^2 - 1) / 2 = eps (1 - 1/n^2) / (2 (ms + eps / n^2)); plus float64 rounding
    // of the logits (1e-13 of their largest size) for the elements near zero.
    const torch::Tensor bound =
        eps * (1.0 - 1.0 / n2) / (2.0 * ms) * pre.abs() + 1e-13 * pre.abs().max().item<double>();
    EXPECT_TRUE((hyper - pre).abs().le(bound).all().item<bool>());
    const double rel = test::max_rel_error(hyper, pre);
    EXPECT_GT(rel, 1e3 * kTol) << "the eps term should show";
    EXPECT_LE(rel, eps / (2.0 * ms.min().item<double>()));
  }
}

// The exactness check is not vacuous: an init that is not the paper's breaks it by orders of
// magnitude (A_r = I + 1e-3 on one sub-layer; A_m reading a mix of streams is harmless at init,
// since the streams are equal, so A_r is what the construction needs).
TEST(Hyper, EquivalenceCheckCatchesAChangedInit) {
  const ModelConfig cfg = hyper_config(2, false);
  equivalence::ModelPair p = same_weights(cfg);
  set_final_eps(p.a, cfg.norm_eps / 4.0);
  EXPECT_LE(equivalence::compare(p, {5}).worst(), kTol);  // as above, before the change
  {
    torch::NoGradGuard no_grad;
    p.b->named_parameters()["blocks.1.attn_hc.static_alpha"].narrow(1, 1, 2).add_(1e-3);
  }
  EXPECT_GT(equivalence::compare(p, {5}).worst(), 1e4 * kTol);
}

// At init every stream carries the same state after every block.
TEST(Hyper, StreamsStayEqualAtInit) {
  const ModelConfig cfg = hyper_config(4, true);
  torch::manual_seed(1);
  DecoderLM m(cfg);
  int seen = 0;
  m->forward(tokens_for(cfg), [&](std::string_view name, int64_t, const torch::Tensor& t) {
    if (name != "x") return;
    ASSERT_EQ(t.dim(), 4);
    EXPECT_EQ(t.size(2), 4);
    for (int64_t i = 1; i < 4; ++i) EXPECT_TRUE(torch::equal(t.select(2, i), t.select(2, 0)));
    ++seen;
  });
  EXPECT_EQ(seen, cfg.n_layers + 1);
}

// The paper's weight decay: none on the static alpha and beta, the scales and the norm gains;
// yes on the dynamic projections W_alpha (a matrix) and W_beta (a vector).
TEST(Hyper, WeightDecayGroups) {
  DecoderLM m(hyper_config(2, true), torch::kMeta);
  const OptimizerConfig o;
  int decayed_hc = 0;
  for (const auto& p : m->named_parameters()) {
    const std::string& k = p.key();
    if (!is_hc(k)) continue;
    const bool want =
        k.find(".w_alpha") != std::string::npos || k.find(".w_beta") != std::string::npos;
    EXPECT_EQ(decays(k, p.value().dim(), o), want) << k;
    decayed_hc += want;
  }
  EXPECT_EQ(decayed_hc, 2 * 2 * 3);  // W_alpha and W_beta of 2 HC layers per block, 3 blocks
}

// mHC at its init (phi = 0, b = 0: H_pre = 1/2, H_post = 1, H_res = 1/n) keeps the streams
// equal, x_j = x, and feeds the branch (n/2) x; with eps = 0 every norm is scale-invariant, so
// the branch and the end see Pre-Norm's values: logits and every shared gradient equal Pre-Norm's
// (eps = 0) up to float64 rounding. The gradient argument is the one above: the streams'
// gradients sum to Pre-Norm's, the branch's input scale n/2 is undone by the norm's Jacobian,
// and nothing reaches the coefficients' input while phi = 0.
TEST(Hyper, MhcAtInitWithZeroEpsIsPreNorm) {
  for (const int64_t n : {1, 2, 4}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    ModelConfig cfg = hyper_config(n, true);
    cfg.hyper.variant = HyperVariant::Mhc;
    cfg.norm_eps = 0.0;
    equivalence::ModelPair p = same_weights(cfg);
    const auto report = equivalence::compare(p, {5});
    EXPECT_LE(report.worst(), kTol) << report;
    // with the final norm's eps back, it is not exact any more: the check can fail
    set_final_eps(p.a, 1e-3);
    if (n > 1) {
      EXPECT_GT(equivalence::compare(p, {5}).worst(), 1e3 * kTol);
    }
  }
}

TEST(Hyper, MhcWeightDecayAndInit) {
  ModelConfig cfg = hyper_config(2, true);
  cfg.hyper.variant = HyperVariant::Mhc;
  DecoderLM m(cfg);
  const OptimizerConfig o;
  for (const auto& p : m->named_parameters()) {
    const std::string& k = p.key();
    if (!is_hc(k)) continue;
    const bool phi = k.size() > 4 && k.compare(k.size() - 4, 4, ".phi") == 0;
    EXPECT_EQ(decays(k, p.value().dim(), o), phi) << k;
    const double init = k.find(".a_") != std::string::npos ? 0.01 : 0.0;
    EXPECT_TRUE(torch::equal(p.value(), torch::full_like(p.value(), init))) << k;
  }
}

// The scheme-wide tests (SchemeTest, GenerateScheme, ActivationCheckpointing, Fsdp) run the
// default variant; mHC's coefficients read a whole token (vec(H)), so check it keeps causality
// with the KV cache and gives the same gradients under activation checkpointing, away from init.
TEST(Hyper, MhcWithTheKvCacheAndActivationCheckpointing) {
  ModelConfig cfg = hyper_config(4, true);
  cfg.hyper.variant = HyperVariant::Mhc;
  torch::manual_seed(2);
  DecoderLM m(cfg);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : m->parameters()) p.add_(0.1 * torch::randn_like(p));
  }
  const torch::Tensor tokens = tokens_for(cfg);
  torch::Tensor full, pieces;
  {
    torch::NoGradGuard no_grad;
    full = m->forward(tokens);
    KVCache cache(*m, tokens.size(0), tokens.size(1), torch::kCPU);
    KVCacheScope scope(*m, cache);
    pieces = torch::cat({m->forward(tokens.narrow(1, 0, 4)), m->forward(tokens.narrow(1, 4, 1)),
                         m->forward(tokens.narrow(1, 5, 2))},
                        1);
  }
  EXPECT_TRUE(close(pieces, full, 1e-5));
  const test::LossAndGrads plain = test::loss_and_grads(m, tokens);
  ActivationCheckpointedBlocks hooks(1);
  m->hooks = &hooks;
  const test::LossAndGrads ckpt = test::loss_and_grads(m, tokens);
  m->hooks = nullptr;
  for (const auto& [name, g] : plain.grads)
    EXPECT_TRUE(close(ckpt.grads.at(name), g, 1e-6)) << name;
}

TEST(Hyper, BadOptionsNameTheirKey) {
  ModelConfig cfg = hyper_config(3, true);
  try {
    validate(cfg);
    FAIL() << "n = 3 accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.hyper.n = 3"), std::string::npos) << e.what();
  }
}
