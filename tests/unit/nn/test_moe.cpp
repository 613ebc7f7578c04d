// Mixture-of-Experts MLP (nn/moe.h): the sorted dispatch against the dense per-expert sum, the
// aux losses where their values follow from the definition alone, the one-expert MoE against
// the dense model, and model.moe's validation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "normlab/nn/attention.h"
#include "normlab/nn/experts.h"
#include "normlab/nn/init.h"
#include "normlab/nn/model.h"
#include "normlab/nn/moe.h"
#include "normlab/nn/router_log.h"
#include "normlab/util/error.h"
#include "support.h"

namespace normlab {
namespace {

ModelConfig moe_config(Scheme scheme, int64_t experts, int64_t top_k, bool renormalize) {
  ModelConfig c = test::tiny_config(scheme);
  c.moe.n_experts = experts;
  c.moe.top_k = top_k;
  c.moe.d_expert = 12;
  c.moe.renormalize = renormalize;
  return c;
}

// A routing problem: random expert weights (SwiGLU up (2h, C) and down (C, h) per expert, E = 4),
// N token rows x each routed to two distinct experts of {0, 1, 3} with random weights (expert 2
// gets no token), and a probe for the gradients of sum(y * probe).
struct Routed {
  static constexpr int64_t E = 4, k = 2;
  std::vector<torch::Tensor> up, down;
  torch::Tensor x, idx, w, probe;

  Routed(int64_t N, int64_t C, int64_t H, torch::Dtype dtype) {
    const auto opts = torch::TensorOptions().dtype(dtype);
    for (int64_t e = 0; e < E; ++e) {
      up.push_back(torch::randn({2 * H, C}, opts).requires_grad_(true));
      down.push_back(torch::randn({C, H}, opts).requires_grad_(true));
    }
    x = torch::randn({N, C}, opts).requires_grad_(true);
    const torch::Tensor choice = torch::tensor({0, 1, 3}, torch::kLong);
    const torch::Tensor first = torch::randint(3, {N}, torch::kLong);
    idx = torch::stack({choice.index_select(0, first), choice.index_select(0, (first + 1) % 3)}, 1);
    w = torch::rand({N, k}, opts).requires_grad_(true);
    probe = torch::randn({N, C}, opts);
  }
  ExpertFn fn() const {
    return [this](int64_t e, const torch::Tensor& rows) {
      const auto vg = torch::matmul(rows, up[e].t()).chunk(2, -1);
      return torch::matmul(torch::silu(vg[1]) * vg[0], down[e].t());
    };
  }
  // d sum(y * probe) / d (x, w, up_0, down_0, ..., up_3, down_3).
  std::vector<torch::Tensor> grads_of(const torch::Tensor& y) const {
    std::vector<torch::Tensor> wrt{x, w};
    for (int64_t e = 0; e < E; ++e) {
      wrt.push_back(up[e]);
      wrt.push_back(down[e]);
    }
    return torch::autograd::grad({(y * probe).sum()}, wrt, {}, /*retain_graph=*/false,
                                 /*create_graph=*/false, /*allow_unused=*/true);
  }
  // EXPECTs y's gradients within `tol` of y_ref's, expert 2's defined and exactly zero.
  void expect_same_gradients(const torch::Tensor& y, const torch::Tensor& y_ref, double tol) const {
    const auto g = grads_of(y), g_ref = grads_of(y_ref);
    ASSERT_EQ(g.size(), g_ref.size());
    for (size_t i = 0; i < g.size(); ++i) {
      ASSERT_TRUE(g[i].defined()) << "gradient " << i << " is undefined";
      if (i == 2 + 2 * 2 || i == 3 + 2 * 2) {  // expert 2: no token, zero gradient
        EXPECT_EQ(g[i].abs().max().item<double>(), 0.0) << i;
        continue;
      }
      EXPECT_TRUE(test::close(g[i], g_ref[i], tol)) << "gradient " << i;
    }
  }
};

// The sorted dispatch (one call per expert on its contiguous rows) equals the dense sum over
// every expert with the routing weights scattered into an (N, E) matrix: outputs and the
// gradients of the input, the weights and every expert matrix, float64. Expert 2 gets no token
// (its gradients must be defined and zero); both sides compute the same products in another
// order, so they agree to float64 rounding over sums of a few terms (1e-12 relative is
// thousands of times that rounding, and a wrong row or weight moves the result by O(1)).
TEST(Moe, SortedDispatchEqualsDensePerExpertSum) {
  torch::manual_seed(3);
  const Routed r(13, 6, 5, torch::kDouble);
  const auto sorted = [&](const torch::Tensor& w) {
    return dispatch_sorted(r.x, r.idx, w, r.E, r.fn());
  };
  const torch::Tensor yd = dispatch_dense(r.x, r.idx, r.w, r.E, r.fn());
  EXPECT_TRUE(test::close(sorted(r.w), yd, 1e-12));
  r.expect_same_gradients(sorted(r.w), dispatch_dense(r.x, r.idx, r.w, r.E, r.fn()), 1e-12);
  // The check can fail: swapping the two weights of every token moves the output by O(1).
  EXPECT_GT(test::max_rel_error(sorted(r.w.flip(1)), yd), 1e-2);
}

// The grouped dispatch (two grouped GEMMs over the stacked expert weights, each expert's slice
// padded to an aligned group of zero rows) equals the loop of the sorted dispatch: outputs and
// the gradients of the input, the routing weights and every expert matrix, in float32 (the
// grouped GEMM takes no float64). 37 tokens x top-2 over experts {0, 1, 3} give slices of about
// 25 rows, across a padding boundary; expert 2 gets none (zero gradient). Both sides form each
// element from the same products of C or h terms, summed perhaps in another order: float32
// rounding of n u with u = 6e-8 and n <= 24, under 2e-6 of the largest terms; 2e-5 allows ten
// times that, and a swapped pair of weights or a row read from the padding moves it by O(1).
TEST(Moe, GroupedDispatchEqualsTheLoop) {
  torch::manual_seed(4);
  const Routed r(37, 8, 12, torch::kFloat);
  const auto grouped = [&](const torch::Tensor& w) {
    return dispatch_grouped(r.x, r.idx, w, torch::stack(r.up), torch::stack(r.down));
  };
  const torch::Tensor yl = dispatch_sorted(r.x, r.idx, r.w, r.E, r.fn());
  EXPECT_TRUE(test::close(grouped(r.w), yl, 2e-5));
  r.expect_same_gradients(grouped(r.w), dispatch_sorted(r.x, r.idx, r.w, r.E, r.fn()), 2e-5);
  EXPECT_GT(test::max_rel_error(grouped(r.w.flip(1)), yl), 1e-2);
}

// model.moe.dispatch: grouped and loop train the same model (float32: the loss and every
// parameter's gradient within the rounding bound above, the same routing counts); auto is the
// loop on the CPU, also in float64; grouped in float64 is refused, naming the key.
TEST(Moe, DispatchChoiceKeepsTheModel) {
  ModelConfig cfg = moe_config(Scheme::SiameseHybrid, 4, 2, false);
  torch::manual_seed(8);
  DecoderLM model(cfg);
  const torch::Tensor tokens = torch::randint(cfg.vocab_size, {3, 11}, torch::kLong);
  const auto run = [&](MoeDispatch d) {
    for (MoeImpl* m : moe_layers(*model)) m->dispatch = d;
    model->zero_grad();
    const LossOutput out = model->loss(tokens, tokens.roll(-1, 1));
    out.loss.backward();
    std::vector<torch::Tensor> grads{out.loss.detach()};
    for (const auto& p : model->parameters()) grads.push_back(p.grad().clone());
    for (size_t i = 0; i < model->moe.size(); ++i)
      grads.push_back(model->router_log->last(static_cast<int64_t>(i)).counts);
    return grads;
  };
  const auto loop = run(MoeDispatch::Loop);
  const auto grouped = run(MoeDispatch::Grouped);
  ASSERT_EQ(loop.size(), grouped.size());
  for (size_t i = 0; i < loop.size(); ++i) {
    if (loop[i].scalar_type() == torch::kLong)
      EXPECT_TRUE(torch::equal(grouped[i], loop[i])) << "routing counts " << i;
    else
      EXPECT_TRUE(test::close(grouped[i], loop[i], 2e-5)) << "loss or gradient " << i;
  }
  const auto automatic = run(MoeDispatch::Auto);
  for (size_t i = 0; i < loop.size(); ++i) EXPECT_TRUE(torch::equal(automatic[i], loop[i])) << i;

  model->to(torch::kDouble);
  EXPECT_NO_THROW(run(MoeDispatch::Auto));
  try {
    run(MoeDispatch::Grouped);
    ADD_FAILURE() << "grouped dispatch in float64 was not refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.moe.dispatch = grouped"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("Double"), std::string::npos) << e.what();
  }
}

// A zero router gives every expert probability 1/E: then P_e = 1/E, so the load-balancing loss
// E * sum_e f_e P_e = sum_e f_e = 1 whatever the top-k picks, and the z-loss is (log E)^2 exactly
// (logsumexp of E zeros). Both follow from the definitions alone.
TEST(Moe, UniformRouterGivesUnitBalanceLossAndLogESquaredZLoss) {
  ModelConfig cfg = moe_config(Scheme::PreNorm, 5, 2, false);
  Moe moe(cfg);
  moe->to(torch::kDouble);
  {
    torch::NoGradGuard no_grad;
    moe->router->weight.zero_();
  }
  const torch::Tensor x = torch::randn({2, 7, cfg.d_model}, torch::kDouble);
  moe(x);
  EXPECT_NEAR(moe->log->last(0).lb.item<double>(), 1.0, 1e-14);
  EXPECT_NEAR(moe->log->last(0).z.item<double>(), std::pow(std::log(5.0), 2), 1e-14);
  EXPECT_NEAR(moe->log->last(0).entropy.item<double>(), std::log(5.0), 1e-14);
  EXPECT_EQ(moe->log->last(0).counts.sum().item<int64_t>(), 2 * 7 * 2);
}

// With every token on one expert, f = e_0 and the loss is E * P_0 with P_0 near 1: near E, its
// maximum. The router row of expert 0 is all ones and the others zero, and the inputs are
// offset by 30, so expert 0's logit (about 30 C = 480) beats the others' 0 by hundreds.
// Renormalised top-1 weights are p / p = 1 exactly.
TEST(Moe, CollapsedRoutingGivesBalanceLossNearE) {
  ModelConfig cfg = moe_config(Scheme::PreNorm, 4, 1, true);
  Moe moe(cfg);
  moe->to(torch::kDouble);
  {
    torch::NoGradGuard no_grad;
    moe->router->weight.zero_();
    moe->router->weight[0].fill_(1.0);
  }
  const torch::Tensor x = torch::randn({3, 5, cfg.d_model}, torch::kDouble) + 30.0;
  const Routing r = moe->route(x.reshape({-1, cfg.d_model}));
  EXPECT_TRUE(torch::equal(r.weights, torch::ones_like(r.weights)));
  moe(x);
  EXPECT_EQ(moe->log->last(0).counts[0].item<int64_t>(), 15);
  EXPECT_GT(moe->log->last(0).lb.item<double>(), 4.0 * (1.0 - 1e-12));
  EXPECT_LE(moe->log->last(0).lb.item<double>(), 4.0 + 1e-12);
}

// One expert, top-1, renormalised: the weight is p / p = 1, so the block's MLP is that expert,
// and the model equals the dense model whose MLP has the expert's weights (float64; the same
// operations in the same order up to the gather and index_add of one row each: 1e-10 relative
// is far above that rounding). The aux losses are left out (weights 0): lb is 1 and the z-loss
// logit^2 in the MoE model, with no counterpart in the dense one.
// The MoE model's counterpart of the dense model's parameter `name` (or of its gradient): a
// block's mlp.up.weight / mlp.down.weight is expert 0's slice of mlp.experts.up / .down.
torch::Tensor as_expert_zero(DecoderLMImpl& moe, const std::string& name, bool grad = false) {
  auto mp = moe.named_parameters();
  for (const char* which : {"up", "down"}) {
    const std::string dense = std::string("mlp.") + which + ".weight";
    const auto at = name.find(dense);
    if (at == std::string::npos) continue;
    const torch::Tensor t = mp[name.substr(0, at) + "mlp.experts." + which];
    return (grad ? t.grad() : t)[0];
  }
  return grad ? mp[name].grad() : mp[name];
}

TEST(Moe, OneExpertTopOneEqualsTheDenseModel) {
  for (const Scheme scheme : {Scheme::PreNorm, Scheme::SiameseHybrid, Scheme::DeepNorm}) {
    SCOPED_TRACE(enum_name(scheme));
    ModelConfig mc = moe_config(scheme, 1, 1, true);
    mc.moe.d_expert = mc.d_ff;
    mc.moe.lb_loss_weight = 0.0;
    mc.moe.z_loss_weight = 0.0;
    ModelConfig dc = mc;
    dc.moe.n_experts = 0;
    torch::manual_seed(5);
    DecoderLM moe(mc);
    DecoderLM dense(dc);
    moe->to(torch::kDouble);
    dense->to(torch::kDouble);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : dense->named_parameters()) p.value().copy_(as_expert_zero(*moe, p.key()));
    }
    torch::manual_seed(6);
    const torch::Tensor tokens = torch::randint(mc.vocab_size, {2, 9}, torch::kLong);
    const LossOutput a = moe->loss(tokens, tokens.roll(-1, 1));
    const LossOutput b = dense->loss(tokens, tokens.roll(-1, 1));
    EXPECT_TRUE(test::close_per_element(a.logits, b.logits, 1e-10, 1e-13));
    a.loss.backward();
    b.loss.backward();
    for (const auto& p : dense->named_parameters()) {
      const torch::Tensor g = as_expert_zero(*moe, p.key(), /*grad=*/true);
      EXPECT_TRUE(test::close_per_element(g, p.value().grad(), 1e-10, 1e-13)) << p.key();
    }
  }
}

// The stacked experts draw their initial weights as the per-expert layout did: after the
// attention and the router, expert by expert, up then down, each from N(0, std) truncated at 3
// std with the dense MLP's stds for d_ff = d_expert. So one seed gives the old weights, bitwise.
TEST(Moe, ExpertsDrawTheirInitInThePerExpertOrder) {
  ModelConfig cfg = moe_config(Scheme::PreNorm, 3, 2, false);
  const int64_t layer = 1, C = cfg.d_model, h = cfg.expert_width();
  torch::manual_seed(21);
  Attention attn(attention_options(cfg, torch::kCPU));
  Moe moe(cfg);
  init_branches(cfg, layer, *attn, *moe);
  ModelConfig expert_cfg = cfg;
  expert_cfg.d_ff = h;
  const BranchStds s = branch_stds(expert_cfg, layer);
  EXPECT_NE(s.mlp_up, s.mlp_down);  // Mitchell: a swap of the two would show
  torch::manual_seed(21);
  for (const torch::Tensor& w : {attn->qkv->weight, attn->out->weight, moe->router->weight})
    trunc_normal_(torch::empty_like(w), 1.0);  // the draws before the experts'
  for (int64_t e = 0; e < 3; ++e) {
    torch::Tensor up = torch::empty({2 * h, C}), down = torch::empty({C, h});
    trunc_normal_(up, s.mlp_up);
    trunc_normal_(down, s.mlp_down);
    EXPECT_TRUE(torch::equal(moe->experts->up[e], up)) << "expert " << e;
    EXPECT_TRUE(torch::equal(moe->experts->down[e], down)) << "expert " << e;
  }
}

// Weights that name the experts one by one (the layout before the stacking) are stacked in
// expert order under any prefix (an optimizer moment's), scalars (step counts) shared by the
// experts become one; a missing expert, differing shapes or differing counts are refused.
TEST(Moe, PerExpertNamesAreStacked) {
  TensorDict w;
  std::vector<torch::Tensor> ups, downs;
  for (int64_t e = 0; e < 3; ++e) {
    ups.push_back(torch::randn({4, 2}));
    downs.push_back(torch::randn({2, 2}));
    const std::string p = "blocks.1.mlp.experts." + std::to_string(e);
    w[p + ".up.weight"] = ups.back();
    w["exp_avg." + p + ".down.weight"] = downs.back();
    w["step." + p + ".up.weight"] = torch::tensor(7.0);
  }
  w["blocks.1.mlp.router.weight"] = torch::randn({3, 2});
  ASSERT_TRUE(has_legacy_experts(w));
  const TensorDict s = stack_legacy_experts(w);
  EXPECT_FALSE(has_legacy_experts(s));
  EXPECT_EQ(s.size(), 4u);
  EXPECT_TRUE(torch::equal(s.at("blocks.1.mlp.experts.up"), torch::stack(ups)));
  EXPECT_TRUE(torch::equal(s.at("exp_avg.blocks.1.mlp.experts.down"), torch::stack(downs)));
  EXPECT_TRUE(torch::equal(s.at("step.blocks.1.mlp.experts.up"), torch::tensor(7.0)));
  EXPECT_TRUE(s.at("blocks.1.mlp.router.weight").is_same(w.at("blocks.1.mlp.router.weight")));
  const auto refused = [](TensorDict bad, const std::string& what) {
    try {
      stack_legacy_experts(std::move(bad));
      ADD_FAILURE() << "accepted: " << what;
    } catch (const CheckpointError& e) {
      EXPECT_THAT(e.what(), testing::HasSubstr(what));
    }
  };
  TensorDict gap = w;
  gap.erase("blocks.1.mlp.experts.1.up.weight");
  refused(gap, "expert 1 is missing");
  TensorDict shape = w;
  shape["blocks.1.mlp.experts.2.up.weight"] = torch::randn({4, 3});
  refused(shape, "another shape");
  TensorDict steps = w;
  steps["step.blocks.1.mlp.experts.0.up.weight"] = torch::tensor(6.0);
  refused(steps, "differ between experts");
  TensorDict both = w;
  both["blocks.1.mlp.experts.up"] = torch::stack(ups);
  refused(both, "both stacked and per expert");
}

// The names of an MoE block's MLP, and `every`: blocks 0, k, 2k, ... are MoE, the others dense.
TEST(Moe, ParameterNamesAndEvery) {
  ModelConfig cfg = moe_config(Scheme::PreNorm, 3, 2, false);
  cfg.n_layers = 4;
  cfg.moe.every = 2;
  DecoderLM model(cfg, torch::kMeta);
  const auto params = model->named_parameters();
  EXPECT_TRUE(params.contains("blocks.0.mlp.router.weight"));
  EXPECT_EQ(params["blocks.0.mlp.router.weight"].sizes(), torch::IntArrayRef({3, 16}));
  EXPECT_EQ(params["blocks.2.mlp.experts.up"].sizes(), torch::IntArrayRef({3, 24, 16}));
  EXPECT_EQ(params["blocks.2.mlp.experts.down"].sizes(), torch::IntArrayRef({3, 16, 12}));
  EXPECT_FALSE(params.contains("blocks.2.mlp.experts.2.up.weight"));
  EXPECT_FALSE(params.contains("blocks.0.mlp.up.weight"));
  EXPECT_TRUE(params.contains("blocks.1.mlp.up.weight"));
  EXPECT_TRUE(params.contains("blocks.3.mlp.up.weight"));
  EXPECT_FALSE(params.contains("blocks.1.mlp.router.weight"));
  ASSERT_EQ(model->moe.size(), 2u);
  EXPECT_EQ(model->moe[0].first, 0);
  EXPECT_EQ(model->moe[1].first, 2);
}

// The gradients the MoE layer injects for its aux losses (nn/aux_loss.h) equal those of the
// formulation that adds them to the loss: loss_scale * (F + lb_w * lb / L + z_w * z / L), F a
// function of the output, lb and z computed from the same routing by their definitions. Float64;
// the two sides sum the router's gradient contributions in another order (here the aux
// contribution reaches the router weight through a second matmul), so they agree to float64
// rounding over sums of a few dozen terms: 1e-12 relative is a thousand times that, while a
// wrong scale, weight or 1/L changes the aux share of the router gradient by O(1).
TEST(Moe, InjectedAuxGradientsEqualTheAddedLossTerms) {
  ModelConfig cfg = moe_config(Scheme::PreNorm, 4, 2, false);
  torch::manual_seed(12);
  Moe moe(cfg);
  moe->to(torch::kDouble);
  for (const auto& p : moe->parameters()) {
    torch::NoGradGuard no_grad;
    p.normal_(0.0, 0.5);
  }
  moe->lb_loss_weight = 0.5;
  moe->z_loss_weight = 0.2;
  moe->averaged_over = 3;
  const double scale = 0.25;
  const torch::Tensor x = torch::randn({3, 5, cfg.d_model}, torch::kDouble);
  const torch::Tensor probe = 0.01 * torch::randn_like(x);  // small: the aux terms weigh in
  const auto grads = [&](double injected_scale, bool added) {
    moe->zero_grad();
    moe->loss_scale = injected_scale;
    const torch::Tensor xi = x.clone().requires_grad_(true);
    torch::Tensor loss = (moe(xi) * probe).sum();
    if (added) {
      const torch::Tensor rows = xi.reshape({-1, cfg.d_model});
      const Routing r = moe->route(rows);
      const torch::Tensor f = torch::bincount(r.experts.reshape({-1}), {}, 4).to(torch::kDouble) /
                              static_cast<double>(rows.size(0) * 2);
      const torch::Tensor lb = 4.0 * (f * r.probs.mean(0)).sum();
      const torch::Tensor z = torch::logsumexp(r.logits, -1).pow(2).mean();
      loss = loss + 0.5 * (lb / 3.0) + 0.2 * (z / 3.0);
    }
    (loss * scale).backward();
    std::vector<torch::Tensor> g{xi.grad()};
    for (const auto& p : moe->parameters()) g.push_back(p.grad().clone());
    return g;
  };
  const auto injected = grads(scale, false), added = grads(0.0, true), none = grads(0.0, false);
  ASSERT_EQ(injected.size(), added.size());
  for (size_t i = 0; i < injected.size(); ++i)
    EXPECT_TRUE(test::close_per_element(injected[i], added[i], 1e-12, 1e-14)) << i;
  // The check can fail: without the aux terms the router's gradient (index 1) is another.
  EXPECT_GT(test::max_rel_error(none[1], added[1]), 1e-2);
}

// The router log keeps each MoE layer's latest routing; between begin_step and take_step it
// also collects every pass (one record per layer), and take_step empties it: the next step
// starts from nothing, and passes outside a step are not collected.
TEST(Moe, RouterLogCollectsAStepsPassesAndEmpties) {
  ModelConfig cfg = moe_config(Scheme::PreNorm, 4, 2, false);
  torch::manual_seed(3);
  DecoderLM model(cfg);
  const torch::Tensor a = torch::randint(cfg.vocab_size, {2, 6}, torch::kLong);
  const torch::Tensor b = torch::randint(cfg.vocab_size, {3, 4}, torch::kLong);
  RouterLog& log = *model->router_log;
  model->forward(a);  // outside a step
  EXPECT_EQ(log.step_passes(), 0u);
  EXPECT_EQ(log.last(1).counts.sum().item<int64_t>(), 2 * 6 * 2);
  EXPECT_THROW(log.last(2), std::out_of_range);
  log.begin_step();
  model->forward(a);
  model->forward(b);
  EXPECT_EQ(log.step_passes(), 2u);
  const auto step = log.take_step();
  ASSERT_EQ(step.size(), 2u);
  for (const auto& pass : step) ASSERT_EQ(pass.size(), 2u);
  EXPECT_EQ(step[0][0].counts.sum().item<int64_t>(), 2 * 6 * 2);
  EXPECT_EQ(step[1][1].counts.sum().item<int64_t>(), 3 * 4 * 2);
  EXPECT_TRUE(torch::equal(step[1][0].counts, log.last(0).counts));
  EXPECT_EQ(log.step_passes(), 0u);
  model->forward(a);  // after the step: not collected
  EXPECT_TRUE(log.take_step().empty());
  log.begin_step();
  model->forward(b);
  EXPECT_EQ(log.take_step().size(), 1u);  // only this step's pass
}

// The model's loss adds the weighted aux losses, averaged over the MoE layers.
TEST(Moe, LossAddsWeightedAuxLossesAveragedOverLayers) {
  ModelConfig cfg = moe_config(Scheme::PreNorm, 4, 2, false);
  cfg.moe.lb_loss_weight = 0.3;
  cfg.moe.z_loss_weight = 0.7;
  torch::manual_seed(2);
  DecoderLM model(cfg);
  model->to(torch::kDouble);
  const torch::Tensor tokens = torch::randint(cfg.vocab_size, {2, 6}, torch::kLong);
  const LossOutput out = model->loss(tokens, tokens.roll(-1, 1));
  ASSERT_EQ(model->moe.size(), 2u);
  const RouterLog& log = *model->router_log;
  const double lb = (log.last(0).lb + log.last(1).lb).item<double>() / 2;
  const double z = (log.last(0).z + log.last(1).z).item<double>() / 2;
  EXPECT_NEAR(out.lb.item<double>(), lb, 1e-15);
  EXPECT_NEAR(out.router_z.item<double>(), z, 1e-15);
  EXPECT_NEAR(out.loss.item<double>(), out.ce.item<double>() + 0.3 * lb + 0.7 * z, 1e-14);
  EXPECT_GT(lb, 0.9);  // at least ~1 (its minimum is 1 only in expectation over f and P)
  EXPECT_GT(z, 0.0);
}

std::string moe_error(const std::function<void(MoeOptions&)>& edit) {
  ModelConfig c = moe_config(Scheme::PreNorm, 4, 2, false);
  edit(c.moe);
  try {
    validate(c);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Moe, BadValuesNameTheirKey) {
  EXPECT_EQ(moe_error([](MoeOptions&) {}), "");
  EXPECT_NE(moe_error([](MoeOptions& m) { m.top_k = 5; }).find("model.moe.top_k = 5"),
            std::string::npos);
  EXPECT_NE(moe_error([](MoeOptions& m) { m.top_k = 0; }).find("model.moe.top_k"),
            std::string::npos);
  EXPECT_NE(moe_error([](MoeOptions& m) { m.n_experts = -1; }).find("model.moe.n_experts"),
            std::string::npos);
  EXPECT_NE(moe_error([](MoeOptions& m) { m.d_expert = -3; }).find("model.moe.d_expert"),
            std::string::npos);
  EXPECT_NE(moe_error([](MoeOptions& m) { m.every = 0; }).find("model.moe.every"),
            std::string::npos);
  EXPECT_NE(
      moe_error([](MoeOptions& m) { m.lb_loss_weight = -1; }).find("model.moe.lb_loss_weight"),
      std::string::npos);
  EXPECT_NE(moe_error([](MoeOptions& m) { m.z_loss_weight = -1; }).find("model.moe.z_loss_weight"),
            std::string::npos);
  // n_experts 0 is the dense model: the other keys are not checked.
  EXPECT_EQ(moe_error([](MoeOptions& m) {
              m.n_experts = 0;
              m.top_k = 99;
            }),
            "");
}

}  // namespace
}  // namespace normlab
