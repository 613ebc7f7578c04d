// The shared components against their formulas: norms, RoPE, attention, SwiGLU, init.
#include "normlab/nn/attention.h"
#include "normlab/nn/init.h"
#include "normlab/nn/mlp.h"
#include "normlab/nn/model.h"
#include "normlab/nn/norm.h"
#include "normlab/nn/rope.h"
#include "support.h"

using namespace normlab;
using normlab::test::close;

TEST(Norm, RmsNormMatchesItsFormula) {
  torch::manual_seed(0);
  Norm n(NormOptions(6).eps(1e-5));
  torch::NoGradGuard g;
  n->weight.uniform_(0.5, 1.5);
  const torch::Tensor x = torch::randn({3, 4, 6}, torch::kDouble);
  n->to(torch::kDouble);
  const torch::Tensor expected = n->weight * x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-5);
  EXPECT_TRUE(close(n(x), expected, 1e-12));
}

TEST(Norm, LayerNormHasNoBiasAndMatchesItsFormula) {
  Norm n(NormOptions(5).type(NormType::LayerNorm).eps(1e-5));
  EXPECT_EQ(n->parameters().size(), 1u);
  const torch::Tensor x = torch::randn({2, 5}, torch::kDouble);
  n->to(torch::kDouble);
  const torch::Tensor c = x - x.mean(-1, true);
  EXPECT_TRUE(close(n(x), c * torch::rsqrt(c.pow(2).mean(-1, true) + 1e-5), 1e-12));
}

TEST(Norm, GainIsOptionalAndReducedPrecisionIsNormalisedInFp32) {
  Norm plain(NormOptions(8).gain(false));
  EXPECT_TRUE(plain->parameters().empty());
  const torch::Tensor x = torch::randn({4, 8}) * 100;
  const torch::Tensor y = plain(x.to(torch::kBFloat16));
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  // The bf16 result is the fp32 result rounded once (not a bf16 reduction).
  EXPECT_TRUE(
      torch::equal(y, plain(x.to(torch::kBFloat16).to(torch::kFloat)).to(torch::kBFloat16)));
}

TEST(Rope, RotateHalfFormAndRelativePositions) {
  const int64_t D = 8;
  const RopeTables t = rope_tables(6, D, 10000.0, torch::kCPU, torch::kDouble);
  // Position 0 is the identity; frequencies are theta^(-2i/D) duplicated over both halves.
  EXPECT_TRUE(torch::allclose(t.cos[0], torch::ones({D}, torch::kDouble)));
  EXPECT_NEAR(t.sin[1][1].item<double>(), std::sin(std::pow(10000.0, -2.0 / D)), 1e-15);
  EXPECT_NEAR(t.sin[1][1 + D / 2].item<double>(), t.sin[1][1].item<double>(), 0.0);
  // Dot products of rotated vectors depend only on the distance between positions.
  torch::manual_seed(1);
  const torch::Tensor q = torch::randn({D}, torch::kDouble), k = torch::randn({D}, torch::kDouble);
  auto at = [&](const torch::Tensor& v, int64_t p) {  // x is (B, T, H, D)
    return rope_apply(v.expand({1, 6, 1, D}), t)[0][p][0];
  };
  EXPECT_NEAR(at(q, 3).dot(at(k, 1)).item<double>(), at(q, 4).dot(at(k, 2)).item<double>(), 1e-12);
  // Rotation preserves the norm.
  EXPECT_NEAR(at(q, 5).norm().item<double>(), q.norm().item<double>(), 1e-12);
}

TEST(Attention, GroupedQueryMatchesExplicitSoftmaxAttention) {
  torch::manual_seed(2);
  Attention a(AttentionOptions(16, 4).n_kv_heads(2));
  torch::NoGradGuard g;
  for (auto& p : a->parameters()) p.normal_(0, 0.3);
  a->to(torch::kDouble);
  const int64_t B = 2, T = 5, H = 4, Hk = 2, D = 4;
  const torch::Tensor x = torch::randn({B, T, 16}, torch::kDouble);

  const auto parts = torch::linear(x, a->qkv->weight).split({H * D, Hk * D, Hk * D}, -1);
  const RopeTables t = rope_tables(T, D, 10000.0, torch::kCPU, torch::kDouble);
  const torch::Tensor q = rope_apply(parts[0].view({B, T, H, D}), t).transpose(1, 2);
  const torch::Tensor k =
      rope_apply(parts[1].view({B, T, Hk, D}), t).transpose(1, 2).repeat_interleave(H / Hk, 1);
  const torch::Tensor v = parts[2].view({B, T, Hk, D}).transpose(1, 2).repeat_interleave(H / Hk, 1);
  torch::Tensor s = torch::matmul(q, k.transpose(-1, -2)) / std::sqrt(double(D));
  s = s.masked_fill(torch::ones({T, T}, torch::kBool).triu(1), -INFINITY);
  const torch::Tensor y =
      torch::matmul(torch::softmax(s, -1), v).transpose(1, 2).reshape({B, T, H * D});
  EXPECT_TRUE(close(a(x), torch::linear(y, a->out->weight), 1e-12));
}

TEST(Mlp, SwiGluTakesValueThenGateHalves) {
  torch::manual_seed(3);
  Mlp m(4, 3);
  torch::NoGradGuard g;
  for (auto& p : m->parameters()) p.normal_();
  const torch::Tensor x = torch::randn({2, 4});
  const torch::Tensor u = torch::linear(x, m->up->weight);
  const torch::Tensor expected =
      torch::linear(torch::silu(u.narrow(-1, 3, 3)) * u.narrow(-1, 0, 3), m->down->weight);
  EXPECT_TRUE(close(m(x), expected, 1e-6));
}

TEST(Init, TruncatedNormalIsBoundedWithTheRequestedStd) {
  torch::manual_seed(4);
  torch::Tensor w = torch::empty({400, 500});
  trunc_normal_(w, 0.02);
  EXPECT_LE(w.abs().max().item<double>(), 3 * 0.02 + 1e-9);
  // A normal truncated at 3 sigma has std 0.9866 sigma.
  EXPECT_NEAR(w.std().item<double>(), 0.02 * 0.9866, 0.02 * 0.01);
  EXPECT_NEAR(w.mean().item<double>(), 0.0, 1e-4);
}

TEST(Init, MitchellStdsFollowPaperSection3) {
  ModelConfig cfg = test::tiny_config(Scheme::PreNorm);
  cfg.d_model = 64;
  cfg.n_heads = 4;
  cfg.d_ff = 256;
  cfg.n_layers = 3;
  cfg.vocab_size = 512;
  torch::manual_seed(5);
  DecoderLM m(cfg);
  auto std_of = [&](const std::string& n) {
    return m->named_parameters()[n].std().item<double>() / 0.9866;
  };
  const double d = 64, dff = 256;
  EXPECT_NEAR(std_of("embed.weight"), 1 / std::sqrt(d), 0.05 / std::sqrt(d));
  EXPECT_NEAR(std_of("head.weight"), 1 / std::sqrt(d), 0.05 / std::sqrt(d));
  for (int l = 0; l < 3; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    EXPECT_NEAR(std_of(b + "attn.qkv.weight"), 1 / std::sqrt(d), 0.05 / std::sqrt(d));
    EXPECT_NEAR(std_of(b + "mlp.up.weight"), 1 / std::sqrt(d), 0.05 / std::sqrt(d));
    const double out = 1 / std::sqrt(2 * d * (l + 1)), down = 1 / std::sqrt(2 * dff * (l + 1));
    EXPECT_NEAR(std_of(b + "attn.out.weight"), out, 0.08 * out) << l;
    EXPECT_NEAR(std_of(b + "mlp.down.weight"), down, 0.08 * down) << l;
    EXPECT_TRUE(torch::equal(m->named_parameters()[b + "attn_norm.weight"], torch::ones({64})));
  }
}

TEST(Init, MegatronScalesOnlyTheOutputProjections) {
  ModelConfig cfg = test::tiny_config(Scheme::PreNorm);
  cfg.init = InitMethod::Megatron;
  cfg.init_std = 0.02;
  cfg.n_layers = 8;
  const BranchStds s = branch_stds(cfg, 5);
  EXPECT_DOUBLE_EQ(s.qkv, 0.02);
  EXPECT_DOUBLE_EQ(s.mlp_up, 0.02);
  EXPECT_DOUBLE_EQ(s.attn_out, 0.02 / 4.0);
  EXPECT_DOUBLE_EQ(s.mlp_down, 0.02 / 4.0);
  cfg.init = InitMethod::Normal;
  EXPECT_DOUBLE_EQ(branch_stds(cfg, 5).attn_out, 0.02);
}

// DeepNorm: alpha = (2L)^(1/4); beta = (8L)^(-1/4) scales the V rows of the fused qkv
// projection, the attention output and both MLP matrices, and leaves Q and K rows alone.
TEST(Init, DeepNormConstantsAndBetaScaling) {
  ModelConfig cfg = test::tiny_config(Scheme::DeepNorm);
  cfg.n_layers = 16;
  EXPECT_NEAR(cfg.deep_alpha(), 2.3784, 1e-4);
  EXPECT_NEAR(cfg.deep_beta(), 0.2973, 1e-4);

  ModelConfig pre = cfg;
  pre.scheme = Scheme::PostNorm;
  torch::manual_seed(6);
  DecoderLM d(cfg);
  torch::manual_seed(6);
  DecoderLM p(pre);  // same construction order: same draws before scaling
  const int64_t qk = (cfg.n_heads + cfg.kv_heads()) * cfg.head_dim();
  auto w = [](DecoderLM& m, const char* n) {
    return m->named_parameters()[std::string("blocks.3.") + n];
  };
  const double beta = cfg.deep_beta();
  EXPECT_TRUE(torch::allclose(w(d, "attn.qkv.weight").narrow(0, 0, qk),
                              w(p, "attn.qkv.weight").narrow(0, 0, qk)));
  EXPECT_TRUE(torch::allclose(
      w(d, "attn.qkv.weight").narrow(0, qk, cfg.kv_heads() * cfg.head_dim()),
      beta * w(p, "attn.qkv.weight").narrow(0, qk, cfg.kv_heads() * cfg.head_dim())));
  for (const char* n : {"attn.out.weight", "mlp.up.weight", "mlp.down.weight"})
    EXPECT_TRUE(torch::allclose(w(d, n), beta * w(p, n))) << n;
}
