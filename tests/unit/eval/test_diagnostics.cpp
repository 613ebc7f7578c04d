// The paper's diagnostics on constructed cases with known answers: Pre-Norm's stream grows
// with depth, an identity block changes nothing and costs nothing when pruned, hand-set gains
// come back as set, a planted activation is found where it was planted, the logit lens of
// Pre-Norm's last layer is the model itself, and the gradients equal autograd's.
#include "normlab/eval/diagnostics.h"
#include "normlab/nn/weights.h"
#include "support.h"

using namespace normlab;

namespace {

DecoderLM diagnostics_model_of(Scheme s, int64_t layers = 2, uint64_t seed = 0) {
  ModelConfig c = test::tiny_config(s);
  c.n_layers = layers;
  torch::manual_seed(seed);
  return DecoderLM(c);
}

struct Data {
  torch::Tensor inputs, targets;
};

Data batch(int64_t b = 3, int64_t t = 12, uint64_t seed = 1) {
  torch::manual_seed(seed);
  return {torch::randint(0, 32, {b, t}, torch::kLong), torch::randint(0, 32, {b, t}, torch::kLong)};
}

torch::Tensor param(DecoderLMImpl& m, const std::string& name) {
  for (const auto& p : m.named_parameters())
    if (p.key() == name) return p.value();
  ADD_FAILURE() << "no parameter " << name;
  return {};
}

// Makes block l the identity: its branches' output projections are zero.
void zero_block(DecoderLMImpl& m, int64_t l) {
  torch::NoGradGuard g;
  param(m, "blocks." + std::to_string(l) + ".attn.out.weight").zero_();
  param(m, "blocks." + std::to_string(l) + ".mlp.down.weight").zero_();
}

}  // namespace

TEST(Diagnostics, PreNormStreamGrowsWithDepth) {
  DecoderLM m = diagnostics_model_of(Scheme::PreNorm, 6);
  const Data d = batch();
  const DiagnosticsReport r = run_diagnostics(*m, d.inputs, d.targets, {});
  ASSERT_EQ(r.rms.size(), 1u);  // one stream
  const auto& rms = r.rms[0].values;
  ASSERT_EQ(rms.size(), 7u);  // entry + 6 blocks
  for (size_t i = 1; i < rms.size(); ++i) EXPECT_GT(rms[i], rms[i - 1]) << "layer " << i - 1;
  // The same numbers as computing them by hand from the probe.
  std::vector<torch::Tensor> xs;
  m->hidden(d.inputs, [&](std::string_view n, int64_t, const torch::Tensor& t) {
    if (n == "x") xs.push_back(t.detach());
  });
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_NEAR(rms[i], xs[i].to(torch::kDouble).pow(2).mean().sqrt().item<double>(), 1e-9);
    EXPECT_NEAR(r.l2[0].values[i], xs[i].to(torch::kDouble).norm(2, {-1}).mean().item<double>(),
                1e-9);
  }
}

TEST(Diagnostics, AnIdentityBlockChangesNothingAndPrunesForFree) {
  DecoderLM m = diagnostics_model_of(Scheme::PreNorm, 4);
  zero_block(*m, 2);
  const Data d = batch();
  DiagnosticsOptions o;
  o.pruning = true;
  const DiagnosticsReport r = run_diagnostics(*m, d.inputs, d.targets, o);
  const auto& rms = r.rms[0].values;
  EXPECT_EQ(rms[3], rms[2]);  // block 2's output (index 3) is its input
  ASSERT_EQ(r.pruning.size(), 4u);
  ASSERT_TRUE(r.pruning_base.has_value());
  EXPECT_EQ(r.pruning[2], *r.pruning_base);  // skipping the identity changes nothing
  for (int l : {0, 1, 3})
    EXPECT_NE(r.pruning[static_cast<size_t>(l)], *r.pruning_base) << "block " << l;
  // The gradient passes the identity block unchanged.
  const auto& g = r.stream_grad[0].values;
  EXPECT_NEAR(g[2], g[3], 1e-6 * g[3]);
}

TEST(Diagnostics, GradientsAreAutogradsAndLeaveTheParametersAlone) {
  DecoderLM m = diagnostics_model_of(Scheme::Siamese, 3);
  const Data d = batch();
  // Independent: a plain backward pass, then the norms of the parameters' .grad.
  m->zero_grad();
  const LossOutput out = m->loss(d.inputs, d.targets);
  out.ce.backward();
  std::vector<double> attn(3, 0.0), mlp(3, 0.0);
  std::map<std::string, torch::Tensor> before;
  for (const auto& p : m->named_parameters()) {
    before[p.key()] = p.value().grad().clone();
    for (int l = 0; l < 3; ++l) {
      const std::string b = "blocks." + std::to_string(l) + ".";
      if (p.key().rfind(b + "attn.", 0) == 0)
        attn[static_cast<size_t>(l)] += p.value().grad().pow(2).sum().item<double>();
      if (p.key().rfind(b + "mlp.", 0) == 0)
        mlp[static_cast<size_t>(l)] += p.value().grad().pow(2).sum().item<double>();
    }
  }
  m->train();
  const DiagnosticsReport r = run_diagnostics(*m, d.inputs, d.targets, {});
  EXPECT_TRUE(m->is_training());  // mode restored
  EXPECT_NEAR(r.loss, out.ce.item<double>(), 1e-5);
  for (size_t l = 0; l < 3; ++l) {
    EXPECT_NEAR(r.attn_grad[l], std::sqrt(attn[l]), 1e-4 * std::sqrt(attn[l])) << l;
    EXPECT_NEAR(r.mlp_grad[l], std::sqrt(mlp[l]), 1e-4 * std::sqrt(mlp[l])) << l;
  }
  for (const auto& p : m->named_parameters())  // .grad untouched
    EXPECT_TRUE(torch::equal(p.value().grad(), before[p.key()])) << p.key();
  ASSERT_EQ(r.stream_grad.size(), 2u);  // x and y
  EXPECT_EQ(r.stream_grad[1].stream, "y");
  for (const auto& s : r.stream_grad)
    for (double v : s.values) EXPECT_GT(v, 0.0);
}

TEST(Diagnostics, HandSetGainsComeBackAsSet) {
  for (Scheme s : {Scheme::SiameseHybrid, Scheme::Siamese}) {
    DecoderLM m = diagnostics_model_of(s, 2);
    {
      torch::NoGradGuard g;
      const bool hybrid = s == Scheme::SiameseHybrid;
      param(*m, hybrid ? "blocks.1.c1" : "blocks.1.attn_post_norm.weight").fill_(2.0);
      param(*m, "blocks.1.attn_y_norm.weight").fill_(0.5);
      param(*m, hybrid ? "blocks.0.mlp_norm.weight" : "blocks.0.mlp_post_norm.weight").fill_(1.05);
      param(*m, "blocks.0.mlp_y_norm.weight").fill_(0.42);
      param(*m, "final_norm_x.weight").fill_(3.0);
      param(*m, "final_norm_y.weight").fill_(1.5);
    }
    const Data d = batch();
    const DiagnosticsReport r = run_diagnostics(*m, d.inputs, d.targets, {});
    ASSERT_EQ(r.gains.size(), 5u) << enum_name(s);  // 2 blocks x {attn, mlp} + final
    auto find = [&](int64_t layer, const std::string& branch) {
      for (const auto& g : r.gains)
        if (g.layer == layer && g.branch == branch) return g;
      ADD_FAILURE() << "no gain row " << layer << " " << branch;
      return GainRatio{};
    };
    EXPECT_DOUBLE_EQ(find(1, "attn").x_gain, 2.0);
    EXPECT_DOUBLE_EQ(find(1, "attn").y_gain, 0.5);
    EXPECT_DOUBLE_EQ(find(1, "attn").ratio, 4.0);
    EXPECT_NEAR(find(0, "mlp").ratio, 1.05 / 0.42, 1e-6);
    EXPECT_DOUBLE_EQ(find(-1, "final").ratio, 2.0);
    EXPECT_DOUBLE_EQ(find(0, "attn").ratio, 1.0);  // untouched: the init value
  }
  DecoderLM pre = diagnostics_model_of(Scheme::PreNorm, 2);
  const Data d = batch();
  EXPECT_TRUE(run_diagnostics(*pre, d.inputs, d.targets, {})
                  .gains.empty());  // no shared two-stream branches
}

TEST(Diagnostics, PlantedMassiveActivationIsFoundWhereItWasPlanted) {
  DecoderLM m = diagnostics_model_of(Scheme::PreNorm, 2);
  Data d = batch();
  d.inputs.fill_(1);
  d.inputs[2][7] = 5;  // token 5 appears once: batch 2, position 7
  {
    torch::NoGradGuard g;
    param(*m, "embed.weight")[5][11] = -100.0;
  }
  DiagnosticsOptions o;
  o.top_k = 3;
  const DiagnosticsReport r = run_diagnostics(*m, d.inputs, d.targets, o);
  ASSERT_EQ(r.massive.size(), 3u);  // entry + 2 blocks, one stream
  const MassiveActivations& entry = r.massive[0];
  EXPECT_EQ(entry.layer, -1);
  ASSERT_EQ(entry.top.size(), 3u);
  EXPECT_EQ(entry.top[0].value, -100.0);
  EXPECT_EQ(entry.top[0].batch, 2);
  EXPECT_EQ(entry.top[0].token, 7);
  EXPECT_EQ(entry.top[0].channel, 11);
  EXPECT_GT(entry.max_over_median, 100.0);
  EXPECT_GE(std::abs(entry.top[0].value), std::abs(entry.top[1].value));
}

TEST(Diagnostics, LogitLensOfTheLastPreNormLayerIsTheModel) {
  for (Scheme s : {Scheme::PreNorm, Scheme::SiameseHybrid, Scheme::ResiDual}) {
    DecoderLM m = diagnostics_model_of(s, 3);
    const Data d = batch();
    const DiagnosticsReport r = run_diagnostics(*m, d.inputs, d.targets, {});
    const size_t streams = s == Scheme::PreNorm ? 1 : 2;
    ASSERT_EQ(r.lens.size(), streams) << enum_name(s);
    for (const auto& l : r.lens) {
      ASSERT_EQ(l.values.size(), 4u);
      for (double v : l.values) {
        EXPECT_GE(v, 0.0);
        EXPECT_LE(v, 1.0);
      }
    }
    if (s == Scheme::PreNorm) {
      EXPECT_EQ(r.lens[0].values.back(), 1.0);
    }
  }
}

// SiameseNorm x Hyper-Connections: Y is (B, T, n, C). With n = 1 at the HC init the model is
// plain siamese_hybrid (tests/unit/nn/test_siamese_hyper.cpp) on the same seed (the connections
// draw no random numbers), so every diagnostic equals the plain model's; with n = 2 the lens
// fuses each stream alone with zeros of the other's shape.
TEST(Diagnostics, SiameseHyperStreamsGiveThePlainModelsDiagnosticsAtOneStream) {
  const Data d = batch();
  const DiagnosticsReport plain =
      run_diagnostics(*diagnostics_model_of(Scheme::SiameseHybrid, 3), d.inputs, d.targets, {});
  for (const int64_t n : {1, 2}) {
    ModelConfig c = test::tiny_config(Scheme::SiameseHybrid);
    c.n_layers = 3;
    c.siamese.hyper.n = n;
    torch::manual_seed(0);
    DecoderLM m(c);
    const DiagnosticsReport r = run_diagnostics(*m, d.inputs, d.targets, {});
    ASSERT_EQ(r.lens.size(), 2u);
    ASSERT_EQ(r.rms.size(), 2u);
    for (size_t s = 0; s < 2; ++s) {
      ASSERT_EQ(r.lens[s].values.size(), 4u);
      for (size_t i = 0; i < 4; ++i) {
        EXPECT_GE(r.lens[s].values[i], 0.0);
        EXPECT_LE(r.lens[s].values[i], 1.0);
        if (n > 1) continue;
        EXPECT_EQ(r.lens[s].values[i], plain.lens[s].values[i]) << s << " " << i;
        EXPECT_NEAR(r.rms[s].values[i], plain.rms[s].values[i], 1e-6 * plain.rms[s].values[i]);
        // (not at the entry: the plain model's X0 and Y0 are one tensor, the embedding, whose
        // gradient takes both streams'; the hyper-streams are n copies of it)
        if (i > 0) {
          EXPECT_NEAR(r.stream_grad[s].values[i], plain.stream_grad[s].values[i],
                      1e-5 * plain.stream_grad[s].values[i]);
        }
      }
    }
  }
}

TEST(Diagnostics, JsonLineHoldsEverySection) {
  DecoderLM m = diagnostics_model_of(Scheme::SiameseHybrid, 2);
  const Data d = batch();
  DiagnosticsOptions o;
  o.pruning = true;
  DiagnosticsReport r = run_diagnostics(*m, d.inputs, d.targets, o);
  r.step = 40;
  const std::string j = diagnostics_json(r);
  for (const char* key : {"\"step\":40", "\"rms\":{\"x\":[", "\"y\":[", "\"l2\"", "\"stream_grad\"",
                          "\"attn_grad\"", "\"mlp_grad\"", "\"gains\"", "\"lens\"", "\"massive\"",
                          "\"pruning_base\"", "\"pruning\":["})
    EXPECT_NE(j.find(key), std::string::npos) << key << " in " << j.substr(0, 300);
  EXPECT_EQ(j.find('\n'), std::string::npos);
}

// MoE routing: per MoE layer, the shares are the layer's assignment counts over N * top_k (so
// they sum to 1, and with top-2 no expert exceeds 1/2: a token picks an expert at most once);
// the idle count is the number of zero shares; the JSON line carries them; a dense model has no
// routing entry.
TEST(Diagnostics, MoeRoutingSharesPerLayerAndExpert) {
  ModelConfig c = test::tiny_config(Scheme::PreNorm);
  c.moe.n_experts = 4;
  c.moe.top_k = 2;
  c.moe.d_expert = 8;
  c.moe.every = 2;
  c.n_layers = 3;  // MoE in blocks 0 and 2
  torch::manual_seed(0);
  DecoderLM m(c);
  const Data d = batch();
  DiagnosticsOptions o;
  o.gradients = false;
  const DiagnosticsReport r = run_diagnostics(*m, d.inputs, d.targets, o);
  ASSERT_EQ(r.routing.size(), 2u);
  EXPECT_EQ(r.routing[0].layer, 0);
  EXPECT_EQ(r.routing[1].layer, 2);
  for (const auto& layer : r.routing) {
    ASSERT_EQ(layer.share.size(), 4u);
    double sum = 0.0;
    int64_t zeros = 0;
    for (double s : layer.share) {
      sum += s;
      zeros += s == 0.0 ? 1 : 0;
    }
    EXPECT_NEAR(sum, 1.0, 1e-12);
    EXPECT_EQ(layer.idle, zeros);
    EXPECT_GT(layer.entropy, 0.0);
    for (double s : layer.share) EXPECT_LE(s, 0.5);
  }
  {  // the same batch again: the counts of the last MoE layer over 2 N assignments
    torch::NoGradGuard g;
    m->forward(d.inputs);
    const torch::Tensor counts = m->router_log->last(1).counts.to(torch::kDouble);
    for (int64_t e = 0; e < 4; ++e)
      EXPECT_DOUBLE_EQ(r.routing[1].share[static_cast<size_t>(e)],
                       counts[e].item<double>() / (2.0 * static_cast<double>(d.inputs.numel())));
  }
  EXPECT_NE(diagnostics_json(r).find("\"moe\":[{"), std::string::npos);
  const DiagnosticsReport dense =
      run_diagnostics(*diagnostics_model_of(Scheme::PreNorm), d.inputs, d.targets, o);
  EXPECT_TRUE(dense.routing.empty());
  EXPECT_EQ(diagnostics_json(dense).find("\"moe\""), std::string::npos);
}

// Hyper-Connections: the connections' statistics on hand-set parameters. hc (n = 2, DHC): A_r of
// the first attention sub-layer set to diag(3, 4) gives ||A_r||_2 = 4 and ||alpha - init||_F =
// ||diag(2, 3)||_F = sqrt(13); beta = (-2, 1) gives mean |beta| = 1.5 and ||beta - 1|| = 3; the
// untouched sub-layers are at the init (1, 1, 0, 0). mhc (n = 2): b_res = ln 3 I gives
// exp = [[3, 1], [1, 3]], doubly stochastic after one row step: [[.75, .25], [.25, .75]],
// spectral norm 1, ||. - 1/2||_F = 0.5; b_pre = (0, ln 3) gives H_pre = (1/2, 3/4): mean 0.625,
// distance 0.25; b_post = 0 gives H_post = 1. Only the parameters enter, in double (a 2 x 2
// SVD): the hc values are exact in float32, so 1e-12 bounds the error; mhc's ln 3 is stored in
// float32 (off by <= 2^-24 x 1.1 = 6.6e-8), which moves sigmoid by <= 1/4 of that and the
// Sinkhorn entries by < 1e-7, so mhc uses 1e-7. A wrong norm or init misses by > 0.1.
TEST(Diagnostics, HyperConnectionStatisticsOfHandSetConnections) {
  auto value = [](const HyperConnectionStats& h, const std::string& key) {
    for (const auto& [k, v] : h.values)
      if (k == key) return v;
    ADD_FAILURE() << "no " << key;
    return 0.0;
  };
  const Data d = batch();
  {
    ModelConfig c = test::tiny_config(Scheme::Hyper);
    c.hyper.n = 2;
    DecoderLM m(c);
    {
      torch::NoGradGuard g;
      param(*m, "blocks.0.attn_hc.static_alpha")
          .narrow(1, 1, 2)
          .copy_(torch::diag(torch::tensor({3.0, 4.0})));
      param(*m, "blocks.0.attn_hc.static_beta").copy_(torch::tensor({-2.0, 1.0}));
    }
    const DiagnosticsReport r = run_diagnostics(*m, d.inputs, d.targets, {});
    ASSERT_EQ(r.hyper.size(), 4u);  // 2 blocks x (attn, mlp)
    EXPECT_EQ(r.hyper[0].branch, "attn");
    EXPECT_EQ(r.hyper[1].branch, "mlp");
    EXPECT_EQ(r.hyper[0].variant, "hc");
    EXPECT_NEAR(value(r.hyper[0], "a_r_spectral"), 4.0, 1e-12);
    EXPECT_NEAR(value(r.hyper[0], "alpha_dist"), std::sqrt(13.0), 1e-12);
    EXPECT_NEAR(value(r.hyper[0], "beta_abs"), 1.5, 1e-12);
    EXPECT_NEAR(value(r.hyper[0], "beta_dist"), 3.0, 1e-12);
    for (size_t i = 1; i < 4; ++i) {  // A_m = e_(k mod 2) for sub-layer k: the init, per sub-layer
      EXPECT_NEAR(value(r.hyper[i], "a_r_spectral"), 1.0, 1e-12) << i;
      EXPECT_NEAR(value(r.hyper[i], "alpha_dist"), 0.0, 1e-12) << i;
      EXPECT_NEAR(value(r.hyper[i], "beta_abs"), 1.0, 1e-12) << i;
      EXPECT_NEAR(value(r.hyper[i], "beta_dist"), 0.0, 1e-12) << i;
    }
    const std::string j = diagnostics_json(r);
    EXPECT_NE(j.find("\"hyper\":[{"), std::string::npos);
    EXPECT_NE(j.find("\"a_r_spectral\":4.0"), std::string::npos) << j;
  }
  {
    ModelConfig c = test::tiny_config(Scheme::Hyper);
    c.hyper.n = 2;
    c.hyper.variant = HyperVariant::Mhc;
    DecoderLM m(c);
    {
      torch::NoGradGuard g;
      param(*m, "blocks.1.mlp_hc.b_res").copy_(std::log(3.0) * torch::eye(2));
      param(*m, "blocks.1.mlp_hc.b_pre").copy_(torch::tensor({0.0, std::log(3.0)}));
    }
    const DiagnosticsReport r = run_diagnostics(*m, d.inputs, d.targets, {});
    ASSERT_EQ(r.hyper.size(), 4u);
    constexpr double kMhcTol = 1e-7;  // the float32 ln 3 (above)
    const auto& h = r.hyper[3];
    EXPECT_EQ(h.variant, "mhc");
    EXPECT_NEAR(value(h, "h_res_spectral"), 1.0, kMhcTol);
    EXPECT_NEAR(value(h, "h_res_dist"), 0.5, kMhcTol);
    EXPECT_NEAR(value(h, "h_pre_abs"), 0.625, kMhcTol);
    EXPECT_NEAR(value(h, "h_pre_dist"), 0.25, kMhcTol);
    EXPECT_NEAR(value(h, "h_post_abs"), 1.0, kMhcTol);
    EXPECT_NEAR(value(h, "h_post_dist"), 0.0, kMhcTol);
    EXPECT_NEAR(value(r.hyper[0], "h_res_dist"), 0.0, 1e-12);  // the init: H_res = 1/n
  }
  EXPECT_TRUE(run_diagnostics(*diagnostics_model_of(Scheme::PreNorm), d.inputs, d.targets, {})
                  .hyper.empty());
}
