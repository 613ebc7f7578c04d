// The trainer's parts: schedules, AdamW (groups, fused = reference = LibTorch's), clipping,
// the spike detector.
#include <torch/torch.h>

#include "normlab/nn/scheme.h"
#include "normlab/train/export_hf.h"
#include "normlab/train/optimizer.h"
#include "normlab/train/schedule.h"
#include "normlab/train/stability.h"
#include "normlab/util/error.h"
#include "support.h"

using namespace normlab;

TEST(Schedule, EachKindAtChosenSteps) {
  SchedulerConfig c;
  c.warmup_steps = 10;
  c.final_lr_fraction = 0.1;
  const double p = 1e-3;
  const int64_t S = 110;  // steps 0..109; decay from 10 to 109
  c.kind = ScheduleKind::Cosine;
  EXPECT_DOUBLE_EQ(lr_at(c, p, 0, S), p / 10);  // warm-up: (s + 1) / W
  EXPECT_DOUBLE_EQ(lr_at(c, p, 4, S), p / 2);
  EXPECT_DOUBLE_EQ(lr_at(c, p, 10, S), p);  // the peak right after warm-up
  EXPECT_NEAR(lr_at(c, p, 59, S), p * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 49.0 / 99))), 1e-15);
  EXPECT_DOUBLE_EQ(lr_at(c, p, 109, S), 0.1 * p);  // the last step at the final fraction
  c.kind = ScheduleKind::Linear;
  EXPECT_DOUBLE_EQ(lr_at(c, p, 10, S), p);
  EXPECT_NEAR(lr_at(c, p, 43, S), p * (1 - 0.9 * 33.0 / 99), 1e-15);
  EXPECT_NEAR(lr_at(c, p, 109, S), 0.1 * p, 1e-15);
  c.kind = ScheduleKind::Wsd;
  c.decay_fraction = 0.2;  // the last 22 steps decay: 88..109
  EXPECT_DOUBLE_EQ(lr_at(c, p, 50, S), p);
  EXPECT_DOUBLE_EQ(lr_at(c, p, 87, S), p);
  EXPECT_DOUBLE_EQ(lr_at(c, p, 88, S), p);
  EXPECT_NEAR(lr_at(c, p, 99, S), p * (1 - 0.9 * 11.0 / 21), 1e-15);
  EXPECT_NEAR(lr_at(c, p, 109, S), 0.1 * p, 1e-15);
  c.kind = ScheduleKind::Constant;
  EXPECT_DOUBLE_EQ(lr_at(c, p, 100, S), p);
  c.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(lr_at(c, p, 0, S), p);  // no warm-up: the peak from step 0
}

TEST(Optimizer, ParameterGroupsKeepVectorsAndOptionallyEmbeddingsFromDecay) {
  OptimizerConfig c;
  const auto m = torch::zeros({4, 4}), v = torch::zeros({4});
  EXPECT_TRUE(decays("blocks.0.attn.qkv.weight", m.dim(), c));
  EXPECT_FALSE(decays("blocks.0.attn_norm.weight", v.dim(), c));
  EXPECT_FALSE(decays("blocks.0.c1", v.dim(), c));
  EXPECT_TRUE(decays("embed.weight", m.dim(), c));
  EXPECT_TRUE(decays("head.weight", m.dim(), c));
  c.decay_embeddings = false;
  EXPECT_FALSE(decays("embed.weight", m.dim(), c));
  EXPECT_FALSE(decays("head.weight", m.dim(), c));
  EXPECT_TRUE(decays("blocks.0.mlp.up.weight", m.dim(), c));
  // MoE: the router and every expert matrix decay, as in OLMoE (which decays every parameter).
  EXPECT_TRUE(decays("blocks.0.mlp.router.weight", m.dim(), c));
  EXPECT_TRUE(decays("blocks.0.mlp.experts.down", 3, c));

  AdamW opt({{"w", torch::zeros({2, 2})},
             {"g", torch::zeros({2})},
             {"embed.weight", torch::zeros({3, 2})}},
            c);
  ASSERT_EQ(opt.groups().size(), 2u);
  EXPECT_EQ(opt.groups()[0].names, std::vector<std::string>{"w"});
  EXPECT_EQ(opt.groups()[1].names, (std::vector<std::string>{"g", "embed.weight"}));
  EXPECT_DOUBLE_EQ(opt.groups()[1].weight_decay, 0.0);
}

// The fused kernel, the reference loop and LibTorch's own AdamW take the same steps.
TEST(Optimizer, FusedAndReferenceMatchLibTorchAdamW) {
  torch::manual_seed(0);
  const auto w0 = torch::randn({5, 7}, torch::kDouble), b0 = torch::randn({7}, torch::kDouble);
  auto run = [&](int which) {
    torch::Tensor w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
    OptimizerConfig c;
    c.weight_decay = 0.1;
    c.fused = which == 0;
    AdamW ours({{"w", w}, {"b", b}}, c);
    torch::optim::AdamW theirs(
        {torch::optim::OptimizerParamGroup({w}), torch::optim::OptimizerParamGroup({b})},
        torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1));
    static_cast<torch::optim::AdamWOptions&>(theirs.param_groups()[1].options()).weight_decay(0.0);
    for (int step = 0; step < 5; ++step) {
      w.mutable_grad() = torch::sin(w0 * (step + 1)).detach();
      b.mutable_grad() = torch::cos(b0 * (step + 1)).detach();
      if (which == 2)
        theirs.step();
      else
        ours.step(1e-2);
    }
    return std::make_pair(w.detach(), b.detach());
  };
  const auto fused = run(0), reference = run(1), libtorch = run(2);
  EXPECT_TRUE(test::close(fused.first, libtorch.first, 1e-12));
  EXPECT_TRUE(test::close(fused.second, libtorch.second, 1e-12));
  EXPECT_TRUE(test::close(reference.first, libtorch.first, 1e-12));
  EXPECT_TRUE(test::close(reference.second, libtorch.second, 1e-12));
  EXPECT_FALSE(test::close(fused.first, w0, 1e-3));
}

TEST(Optimizer, StateRoundTrips) {
  torch::Tensor w = torch::randn({3, 3}).requires_grad_();
  OptimizerConfig c;
  AdamW a({{"w", w}}, c);
  w.mutable_grad() = torch::ones({3, 3});
  a.step(1e-3);
  a.step(1e-3);
  AdamW b({{"w", w}}, c);
  b.load_state(a.state());
  EXPECT_EQ(b.steps_taken(), 2);
  EXPECT_TRUE(torch::equal(b.state().at("exp_avg_sq.w"), a.state().at("exp_avg_sq.w")));
  EXPECT_THROW(b.load_state({}), CheckpointError);
}

TEST(Optimizer, ClippingReturnsTheNormBeforeAndScalesDown) {
  torch::Tensor a = torch::zeros({2}).requires_grad_(), b = torch::zeros({1}).requires_grad_();
  a.mutable_grad() = torch::tensor({3.0f, 0.0f});
  b.mutable_grad() = torch::tensor({4.0f});
  EXPECT_NEAR(clip_grad_norm({a, b}, 10.0), 5.0, 1e-6);
  EXPECT_NEAR(a.grad()[0].item<double>(), 3.0, 1e-6);  // below the limit: untouched
  EXPECT_NEAR(clip_grad_norm({a, b}, 1.0), 5.0, 1e-6);
  EXPECT_NEAR(std::hypot(a.grad()[0].item<double>(), b.grad()[0].item<double>()), 1.0, 1e-5);
  EXPECT_NEAR(clip_grad_norm({a, b}, 0.0), 1.0, 1e-5);  // 0: measure only
}

TEST(Spikes, ZScoreOverARollingWindow) {
  SpikeDetector d(8, 3.0);
  for (int i = 0; i < 8; ++i) EXPECT_FALSE(d.observe(2.0 + 0.1 * (i % 2)));  // mean 2.05, std 0.05
  EXPECT_FALSE(d.observe(2.15));  // 2 sigma: not a spike at 3 sigma
  EXPECT_TRUE(d.observe(3.0));
  EXPECT_FALSE(d.observe(std::nan("")));
  EXPECT_EQ(d.spikes(), 1);
  SpikeDetector e(8, 3.0);
  e.restore(d.window(), d.spikes());
  EXPECT_EQ(e.observe(9.0), d.observe(9.0));
  EXPECT_EQ(e.spikes(), d.spikes());
}

// The Hugging Face export's scheme list is read from the built-in configuration_normlab.py's
// SCHEMES tuple: each entry is a scheme of the table, none twice, and the first and the last
// of the tuple (pre_norm, reordered_norm) are there, so the parse finds the tuple's ends. (That
// every scheme of the table is listed, or why not, is the CTest scheme_lists' check.)
TEST(HfExport, SchemeListIsTheBuiltInFiles) {
  const std::vector<std::string> names = hf_schemes();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), "pre_norm");
  EXPECT_EQ(names.back(), "reordered_norm");
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_NO_THROW(enum_from_name<Scheme>(names[i], "SCHEMES")) << names[i];
    for (size_t j = 0; j < i; ++j) EXPECT_NE(names[i], names[j]);
  }
}
