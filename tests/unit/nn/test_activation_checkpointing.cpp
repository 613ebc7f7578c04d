// Activation checkpointing (nn/activation_checkpointing.h): the same loss and gradients as the
// plain model, for every scheme, checkpointing every block or every second one (selective), with
// what the forward keeps reduced to the block inputs; which blocks selective picks.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "normlab/nn/activation_checkpointing.h"
#include "normlab/nn/model.h"
#include "support.h"

namespace normlab {
namespace {

using Outcome = test::LossAndGrads;

// every: 0 plain, 1 every block checkpointed, k every k-th (selective).
Outcome run(const ModelConfig& cfg, int64_t every, const torch::Tensor& tokens) {
  torch::manual_seed(9);
  DecoderLM model(cfg);
  ActivationCheckpointedBlocks hooks(every);
  if (every > 0) model->hooks = &hooks;
  Outcome r = test::loss_and_grads(model, tokens);
  model->hooks = nullptr;
  return r;
}

TEST(ActivationCheckpointing, SameLossAndGradientsForEveryScheme) {
  for (const auto& row : EnumNames<Scheme>::rows) {
    SCOPED_TRACE(row.name);
    const ModelConfig cfg = test::tiny_config(row.value);
    torch::manual_seed(1);
    const torch::Tensor tokens = torch::randint(cfg.vocab_size, {3, 7}, torch::kLong);
    const Outcome plain = run(cfg, 0, tokens);
    for (const int64_t every :
         {1, 2}) {  // all blocks; selective: blocks 0, 2, ... of the tiny model's
      const Outcome ckpt = run(cfg, every, tokens);
      EXPECT_EQ(plain.loss, ckpt.loss);
      ASSERT_EQ(plain.grads.size(), ckpt.grads.size());
      for (const auto& [name, g] : plain.grads)
        EXPECT_TRUE(test::close(ckpt.grads.at(name), g, 1e-6)) << name << every;
    }
  }
}

// MoE blocks: the aux losses' gradients ride on the MoE output (nn/aux_loss.h), so the
// recompute of a checkpointed block injects them as the plain forward's backward does. The loss
// and the gradient of every block parameter (the routers' and experts' included) are bitwise the
// plain model's: the recompute runs the same operations on the same values under the same
// autocast state. The one exception is the embedding: its gradient is the gradient of block 0's
// input, the sum of the contributions of that input's uses, which the recompute's inner
// backward adds up in another order. That is float32 rounding of one sum of a few terms; the
// bound is the dense test's above, 1e-6 of the largest magnitude (about 8 float32 ulps;
// measured: 2.4e-7 absolute). Aux weights raised so that their share of the router gradients
// is large.
TEST(ActivationCheckpointing, MoeBlocksKeepTheirAuxLossGradients) {
  for (const Scheme scheme : {Scheme::PreNorm, Scheme::SiameseHybrid}) {
    SCOPED_TRACE(enum_name(scheme));
    ModelConfig cfg = test::tiny_config(scheme);
    cfg.moe.n_experts = 4;
    cfg.moe.top_k = 2;
    cfg.moe.d_expert = 8;
    cfg.moe.lb_loss_weight = 0.5;
    cfg.moe.z_loss_weight = 0.2;
    torch::manual_seed(1);
    const torch::Tensor tokens = torch::randint(cfg.vocab_size, {3, 7}, torch::kLong);
    const Outcome plain = run(cfg, 0, tokens);
    ModelConfig no_aux = cfg;
    no_aux.moe.lb_loss_weight = no_aux.moe.z_loss_weight = 0.0;
    const Outcome without = run(no_aux, 0, tokens);
    // The aux terms move the router gradient (else this test would not see them lost).
    EXPECT_GT(test::max_rel_error(without.grads.at("blocks.0.mlp.router.weight"),
                                  plain.grads.at("blocks.0.mlp.router.weight")),
              1e-2);
    for (const int64_t every : {1, 2}) {
      const Outcome ckpt = run(cfg, every, tokens);
      EXPECT_EQ(plain.loss, ckpt.loss);
      ASSERT_EQ(plain.grads.size(), ckpt.grads.size());
      for (const auto& [name, g] : plain.grads) {
        const torch::Tensor& c = ckpt.grads.at(name);
        const bool same = name == "embed.weight" ? bool(test::close(c, g, 1e-6)) : c.equal(g);
        EXPECT_TRUE(same) << name << " every " << every << ": max difference "
                          << (c - g).abs().max().item<double>();
      }
    }
  }
}

// One training pass through checkpointed MoE blocks logs one record per MoE layer: the
// forward's, not the recompute's in the backward.
TEST(ActivationCheckpointing, MoeRoutingIsLoggedOncePerPass) {
  ModelConfig cfg = test::tiny_config(Scheme::PreNorm);
  cfg.moe.n_experts = 4;
  cfg.moe.top_k = 2;
  torch::manual_seed(1);
  DecoderLM model(cfg);
  ActivationCheckpointedBlocks hooks(1);
  model->hooks = &hooks;
  const torch::Tensor tokens = torch::randint(cfg.vocab_size, {2, 5}, torch::kLong);
  model->router_log->begin_step();
  model->loss(tokens, tokens.roll(-1, 1)).loss.backward();
  const auto passes = model->router_log->take_step();
  model->hooks = nullptr;
  ASSERT_EQ(passes.size(), 1u);
  EXPECT_EQ(passes[0].size(), model->moe.size());
}

TEST(ActivationCheckpointing, SelectivePicksEveryKthBlock) {
  EXPECT_FALSE(activation_checkpointed(0, 0));
  EXPECT_TRUE(activation_checkpointed(1, 3));
  EXPECT_TRUE(activation_checkpointed(2, 0));
  EXPECT_FALSE(activation_checkpointed(2, 1));
  EXPECT_TRUE(activation_checkpointed(3, 6));
  EXPECT_FALSE(activation_checkpointed(3, 7));
}

TEST(ActivationCheckpointing, KeepsOnlyTheBlockInputs) {
  // The autograd graph of a checkpointed block holds one node whose saved tensors are its
  // inputs; the plain block's graph reaches back through many nodes.
  const ModelConfig cfg = test::tiny_config(Scheme::SiameseHybrid);
  torch::manual_seed(9);
  DecoderLM model(cfg);
  const torch::Tensor x = torch::randn({2, 5, cfg.d_model}, torch::requires_grad());
  const torch::Tensor y = torch::randn({2, 5, cfg.d_model}, torch::requires_grad());
  auto count_nodes = [](const torch::Tensor& out) {
    std::set<torch::autograd::Node*> seen;
    std::vector<torch::autograd::Node*> stack{out.grad_fn().get()};
    while (!stack.empty()) {
      auto* n = stack.back();
      stack.pop_back();
      if (!n || !seen.insert(n).second) continue;
      for (const auto& e : n->next_edges()) stack.push_back(e.function.get());
    }
    return seen.size();
  };
  const Streams plain = model->scheme_blocks[0]->forward({x, y});
  const Streams ckpt = activation_checkpointed_forward(*model->scheme_blocks[0], {x, y});
  // The checkpoint node, then straight to the two inputs' accumulators.
  EXPECT_EQ(count_nodes(ckpt.x), 3u);
  EXPECT_GT(count_nodes(plain.x), 20u);
  EXPECT_TRUE(test::close(ckpt.x, plain.x, 0.0));
  EXPECT_TRUE(test::close(ckpt.y, plain.y, 0.0));
}

}  // namespace
}  // namespace normlab
