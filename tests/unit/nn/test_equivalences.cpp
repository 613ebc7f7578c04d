// The paper's structural facts (docs/paper.md, Structural facts) and the reductions between
// schemes, each checked on the same weights in float64.
#include "normlab/nn/attention.h"
#include "normlab/nn/mlp.h"
#include "normlab/nn/model.h"
#include "normlab/nn/weights.h"
#include "normlab/testing/equivalence.h"
#include "support.h"

using namespace normlab;
using normlab::test::close;

namespace {

constexpr double kTol = 1e-10;  // float64: the two sides compute the same numbers

DecoderLM make_double(const ModelConfig& cfg, uint64_t seed) {
  torch::manual_seed(seed);
  DecoderLM m(cfg);
  m->to(torch::kDouble);
  // Random gains so that every norm matters.
  torch::NoGradGuard no_grad;
  for (auto& p : m->named_parameters())
    if (p.value().dim() == 1) p.value().uniform_(0.5, 1.5);
  return m;
}

torch::Tensor tokens_for(const ModelConfig& cfg) {
  torch::manual_seed(99);
  return torch::randint(cfg.vocab_size, {2, 7}, torch::kLong);
}

/// Copies `from`'s parameters into `to` under the renaming `rename(name) -> name in to`
/// (empty: skip), then checks every parameter of `to` was written.
void copy_weights(DecoderLM& from, DecoderLM& to,
                  const std::function<std::string(const std::string&)>& rename) {
  TensorDict mapped;
  for (const auto& [name, t] : weights_of(*from)) {
    const std::string target = rename(name);
    if (!target.empty()) mapped[target] = t;
  }
  load_weights(*to, mapped, "mapped weights");
}

// The reductions below build both models with normlab/testing/equivalence.h: B gets A's weights
// through the map, A's 1-D parameters (norm gains, c1) drawn from U(0.5, 1.5) so that every gain
// matters, and the check covers the logits, the loss and every shared parameter's gradient.
equivalence::WeightMap y_stream_is_pre_norm() {
  equivalence::WeightMap map;
  map.rename("blocks.*.attn_y_norm.weight", "blocks.*.attn_norm.weight")
      .rename("blocks.*.mlp_y_norm.weight", "blocks.*.mlp_norm.weight")
      .rename("final_norm_y.weight", "final_norm.weight")
      .fix_a("final_norm_x.weight", 0.0);
  return map;
}

}  // namespace

// docs/paper.md, Structural facts: zero gain on the X-side norms reduces SiameseNorm to
// Pre-Norm on Y. With the normalized input fusion off and the paper-form output the reduction
// is exact.
TEST(Equivalence, SiameseHybridWithZeroXGainsIsPreNormOnY) {
  ModelConfig cfg = test::tiny_config(Scheme::SiameseHybrid);
  cfg.siamese.input_norm = false;
  cfg.siamese.output_fusion = OutputFusion::Paper;
  ModelConfig pcfg = test::tiny_config(Scheme::PreNorm);
  pcfg.qkv_norm = true;  // the Y stream of the hybrid variant sees q/k/v-normed attention
  equivalence::WeightMap map = y_stream_is_pre_norm();
  map.fix_a("blocks.*.c1", 0.0).fix_a("blocks.*.mlp_norm.weight", 0.0);
  const auto report = equivalence::compare_configs(cfg, pcfg, map, {1});
  EXPECT_LE(report.worst(), kTol) << report;
  EXPECT_EQ(report.gradients.size(), weights_of(*DecoderLM(pcfg, torch::kMeta)).size());
}

TEST(Equivalence, SiamesePostPreWithZeroXGainsIsPreNormOnY) {
  ModelConfig cfg = test::tiny_config(Scheme::Siamese);
  cfg.siamese.input_norm = false;
  cfg.siamese.output_fusion = OutputFusion::Paper;
  equivalence::WeightMap map = y_stream_is_pre_norm();
  map.fix_a("blocks.*.*_post_norm.weight", 0.0);
  const auto report =
      equivalence::compare_configs(cfg, test::tiny_config(Scheme::PreNorm), map, {3});
  EXPECT_LE(report.worst(), kTol) << report;
}

// With the default switches (input fusion on, code-form output) the reduction holds once the
// double normalisation is exact: eps = 0 and unit gains on the Y-side norms before N_in/N.
TEST(Equivalence, SiameseHybridDefaultsWithZeroXGainsIsPreNormOnYAtZeroEps) {
  ModelConfig cfg = test::tiny_config(Scheme::SiameseHybrid);
  cfg.norm_eps = 0.0;
  ModelConfig pcfg = test::tiny_config(Scheme::PreNorm);
  pcfg.qkv_norm = true;
  pcfg.norm_eps = 0.0;
  equivalence::WeightMap map;
  map.fix_a("blocks.*.c1", 0.0)
      .fix_a("blocks.*.mlp_norm.weight", 0.0)
      .fix_a("blocks.*.mlp_y_norm.weight", 1.0)
      .fix_a("final_norm_x.weight", 0.0)
      .fix_a("final_norm_y.weight", 1.0)
      .rename("blocks.*.attn_y_norm.weight", "blocks.*.attn_norm.weight")
      .rename("blocks.*.mlp_in_norm.weight", "blocks.*.mlp_norm.weight");  // final_norm: same name
  const auto report = equivalence::compare_configs(cfg, pcfg, map, {5});
  EXPECT_LE(report.worst(), 1e-9) << report;
}

TEST(Equivalence, DeepNormWithUnitAlphaAndBetaIsPostNorm) {
  ModelConfig dcfg = test::tiny_config(Scheme::DeepNorm);
  dcfg.deep_norm_alpha = 1.0;
  dcfg.deep_norm_beta = 1.0;
  const ModelConfig pcfg = test::tiny_config(Scheme::PostNorm);
  const auto report = equivalence::compare_configs(dcfg, pcfg, {}, {7});
  EXPECT_LE(report.worst(), kTol) << report;

  // ... and the default alpha changes the function (the test above is not vacuous).
  const auto other =
      equivalence::compare_configs(test::tiny_config(Scheme::DeepNorm), pcfg, {}, {7});
  EXPECT_GT(other.logits.max_rel, 1e-3) << other;
}

TEST(Equivalence, HybridNormStarBlock0IsAPreNormBlockWithQkvNorms) {
  const ModelConfig cfg = test::tiny_config(Scheme::HybridNormStar);
  DecoderLM star = make_double(cfg, 9);
  ModelConfig pcfg = test::tiny_config(Scheme::PreNorm);
  pcfg.qkv_norm = true;
  DecoderLM pre = make_double(pcfg, 10);
  DecoderLM hyb = make_double(test::tiny_config(Scheme::HybridNorm), 11);
  load_weights(*pre->scheme_blocks[0], weights_of(*star->scheme_blocks[0]), "block 0");
  load_weights(*hyb->scheme_blocks[1], weights_of(*star->scheme_blocks[1]), "block 1");

  torch::manual_seed(12);
  const torch::Tensor x = torch::randn({2, 5, cfg.d_model}, torch::kDouble);
  EXPECT_TRUE(close(star->scheme_blocks[0]->forward({x, {}}).x,
                    pre->scheme_blocks[0]->forward({x, {}}).x, kTol));
  EXPECT_TRUE(close(star->scheme_blocks[1]->forward({x, {}}).x,
                    hyb->scheme_blocks[1]->forward({x, {}}).x, kTol));
}

TEST(Equivalence, ResiDualXStreamIsThePostNormStream) {
  const ModelConfig cfg = test::tiny_config(Scheme::ResiDual);
  DecoderLM r = make_double(cfg, 13);
  DecoderLM p = make_double(test::tiny_config(Scheme::PostNorm), 14);
  copy_weights(r, p, [](const std::string& n) { return n == "final_norm_y.weight" ? "" : n; });
  std::vector<torch::Tensor> rx, px;
  const torch::Tensor tokens = tokens_for(cfg);
  r->hidden(tokens, [&](std::string_view name, int64_t, const torch::Tensor& t) {
    if (name == "x") rx.push_back(t);
  });
  p->hidden(tokens, [&](std::string_view name, int64_t, const torch::Tensor& t) {
    if (name == "x") px.push_back(t);
  });
  ASSERT_EQ(rx.size(), static_cast<size_t>(cfg.n_layers + 1));
  ASSERT_EQ(rx.size(), px.size());
  for (size_t i = 0; i < rx.size(); ++i) EXPECT_TRUE(close(rx[i], px[i], kTol)) << "layer " << i;
}

TEST(Equivalence, TwoStreamSchemesStartBothStreamsAtTheEmbedding) {
  for (Scheme s : {Scheme::ResiDual, Scheme::Siamese, Scheme::SiameseHybrid}) {
    const ModelConfig cfg = test::tiny_config(s);
    DecoderLM m = make_double(cfg, 15);
    const torch::Tensor tokens = tokens_for(cfg);
    torch::Tensor x0, y0, xl, yl;
    m->hidden(tokens, [&](std::string_view name, int64_t layer, const torch::Tensor& t) {
      if (layer == -1) (name == "x" ? x0 : y0) = t;
      if (layer == cfg.n_layers - 1) (name == "x" ? xl : yl) = t;
    });
    const torch::Tensor emb = m->embed(tokens);
    EXPECT_TRUE(torch::equal(x0, emb)) << enum_name(s);
    EXPECT_TRUE(torch::equal(y0, emb)) << enum_name(s);
    EXPECT_FALSE(close(xl, yl, 1e-3))
        << enum_name(s) << ": the streams should differ after the blocks";
  }
}

// ONE attention and ONE MLP per two-stream block: both streams' updates flow through (and
// send gradient to) the very same parameter tensors.
TEST(Equivalence, SiameseStreamsShareTheBranchParameters) {
  for (Scheme s : {Scheme::Siamese, Scheme::SiameseHybrid}) {
    SCOPED_TRACE(std::string(enum_name(s)));
    const ModelConfig cfg = test::tiny_config(s);
    DecoderLM m = make_double(cfg, 16);
    auto& block = *m->scheme_blocks[1];
    int n_attn = 0, n_mlp = 0;
    for (const auto& child : block.modules(/*include_self=*/false)) {
      n_attn += dynamic_cast<AttentionImpl*>(child.get()) != nullptr;
      n_mlp += dynamic_cast<MlpImpl*>(child.get()) != nullptr;
    }
    EXPECT_EQ(n_attn, 1);
    EXPECT_EQ(n_mlp, 1);

    torch::manual_seed(17);
    const torch::Tensor x = torch::randn({1, 4, cfg.d_model}, torch::kDouble);
    const torch::Tensor y = torch::randn({1, 4, cfg.d_model}, torch::kDouble);
    const torch::Tensor qkv = block.named_parameters()["attn.qkv.weight"];
    const torch::Tensor up = block.named_parameters()["mlp.up.weight"];
    for (bool through_y : {false, true}) {
      const Streams out = block.forward({x, y});
      const auto g = torch::autograd::grad({(through_y ? out.y : out.x).pow(2).sum()}, {qkv, up});
      EXPECT_GT(g[0].abs().sum().item<double>(), 0.0) << (through_y ? "Y" : "X");
      EXPECT_GT(g[1].abs().sum().item<double>(), 0.0) << (through_y ? "Y" : "X");
    }
  }
}

// docs/paper.md, Structural facts: the overhead over the single-stream base is 4d per block
// plus 2d at the end.
TEST(Equivalence, SiameseParameterOverheadIsFourDPerBlockPlusTwoD) {
  for (Scheme s : {Scheme::Siamese, Scheme::SiameseHybrid}) {
    ModelConfig cfg = test::tiny_config(s);
    cfg.n_layers = 5;
    ModelConfig base = cfg;
    base.scheme = scheme_base(s);
    auto count = [](const ModelConfig& c) {
      int64_t n = 0;
      for (const auto& p : DecoderLM(c, torch::kMeta)->parameters()) n += p.numel();
      return n;
    };
    EXPECT_EQ(count(cfg) - count(base), 4 * cfg.d_model * cfg.n_layers + 2 * cfg.d_model)
        << enum_name(s);
  }
}
