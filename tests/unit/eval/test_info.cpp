// normlab info's numbers: parameter counts from the real module, FLOPs and memory estimates.
#include "normlab/config/config_io.h"
#include "normlab/eval/info.h"
#include "support.h"

using namespace normlab;

TEST(Info, PaperSiameseHybrid13BHas128BParameters) {
  const RunConfig c =
      config_load(std::string(NORMLAB_SOURCE_DIR) + "/configs/1.3b/siamese_hybrid.yaml");
  const ParamCounts p = count_parameters(c.model);
  EXPECT_NEAR(static_cast<double>(p.total), 1.28e9, 0.01 * 1.28e9);
  EXPECT_EQ(p.embedding, 50304 * 2048);
  EXPECT_EQ(p.head, 50304 * 2048);
  EXPECT_EQ(p.base, Scheme::HybridNorm);
  EXPECT_EQ(p.extra(), 4 * 2048 * 16 + 2 * 2048);
  int64_t sum = p.embedding + p.head + p.ends;
  for (int64_t b : p.per_block) sum += b;
  EXPECT_EQ(sum, p.total);
}

// Hyper-Connections' overhead (the HC paper's count): 2L HC layers (attention and MLP), each
// n(n+2) static (alpha n x (n+1), beta n) plus, when dynamic, d(n+2) + 2 (W_alpha d x (n+1),
// W_beta d, the scales s_alpha, s_beta).
TEST(Info, HyperExtraParametersFollowThePapersFormula) {
  for (const bool dynamic : {false, true})
    for (const int64_t n : {1, 2, 4}) {
      ModelConfig m = test::tiny_config(Scheme::Hyper);
      m.hyper.n = n;
      m.hyper.dynamic = dynamic;
      const ParamCounts p = count_parameters(m);
      const int64_t per_layer = n * (n + 2) + (dynamic ? m.d_model * (n + 2) + 2 : 0);
      EXPECT_EQ(p.base, Scheme::PreNorm);
      EXPECT_EQ(p.extra(), 2 * m.n_layers * per_layer) << "n=" << n << " dynamic=" << dynamic;
    }
  // mHC: per HC layer the projection phi (n d x (n^2 + 2n)), the biases (n^2 + 2n) and 3 scales.
  for (const int64_t n : {1, 2, 4}) {
    ModelConfig m = test::tiny_config(Scheme::Hyper);
    m.hyper.variant = HyperVariant::Mhc;
    m.hyper.n = n;
    const int64_t per_layer = n * m.d_model * (n * n + 2 * n) + n * n + 2 * n + 3;
    EXPECT_EQ(count_parameters(m).extra(), 2 * m.n_layers * per_layer) << "mhc n=" << n;
  }
  // The paper's 2xDHC baseline at 1.3B (16 layers, d 2048): 32 x 8,202.
  const RunConfig c =
      config_load(std::string(NORMLAB_SOURCE_DIR) + "/configs/1.3b/hyper_dhc2.yaml");
  EXPECT_EQ(count_parameters(c.model).extra(), 262464);
}

// The residual state is n streams: activation memory grows with n (checkpointed: the block
// inputs are n times wider).
TEST(Info, HyperActivationMemoryGrowsWithN) {
  ModelConfig m = test::tiny_config(Scheme::PreNorm);
  MemoryPlan plan;
  plan.activation_checkpointing = true;
  const double pre = estimate_memory(m, plan).activations;
  m.scheme = Scheme::Hyper;
  double last = pre;
  for (const int64_t n : {1, 2, 4, 8}) {
    m.hyper.n = n;
    const double a = estimate_memory(m, plan).activations;
    EXPECT_GT(a, last) << "n=" << n;
    last = a;
  }
}

TEST(Info, FlopsPerTokenCountCausalAttentionAsHalf) {
  ModelConfig m = test::tiny_config(Scheme::PreNorm);
  const ParamCounts p = count_parameters(m);
  // Forward and backward of QK^T and AV over T keys (12 L H D T), halved by the causal mask.
  const double attn = 6.0 * m.n_layers * m.n_heads * m.head_dim() * 128;
  EXPECT_DOUBLE_EQ(flops_per_token(m, 128),
                   6.0 * static_cast<double>(p.total - p.embedding) + attn);
  m.tie_embeddings = true;
  EXPECT_DOUBLE_EQ(flops_per_token(m, 128),
                   6.0 * static_cast<double>(count_parameters(m).total) + attn);
}

TEST(Info, MemoryEstimateRespondsToShardingAndCheckpointing) {
  const RunConfig c =
      config_load(std::string(NORMLAB_SOURCE_DIR) + "/configs/1.3b/siamese_hybrid.yaml");
  MemoryPlan plan;
  const MemoryEstimate full = estimate_memory(c.model, plan);
  const double N = static_cast<double>(count_parameters(c.model).total);
  EXPECT_DOUBLE_EQ(full.weights + full.gradients + full.optimizer, 16.0 * N);
  plan.fsdp = true;
  plan.world_size = 8;
  const MemoryEstimate sharded = estimate_memory(c.model, plan);
  EXPECT_DOUBLE_EQ(sharded.optimizer, full.optimizer / 8);
  plan.activation_checkpointing = true;
  const MemoryEstimate ac = estimate_memory(c.model, plan);
  EXPECT_LT(ac.activations, sharded.activations / 4);
  EXPECT_DOUBLE_EQ(ac.logits, sharded.logits);
  // Reducing once per step keeps an unsharded fp32 gradient; waiting for each reduce-scatter at
  // once saves the flat gradient in flight (the largest unit's, 4 bytes per element; here the
  // root unit: embedding, head and end norms).
  plan.reduce_per_step = true;
  EXPECT_DOUBLE_EQ(estimate_memory(c.model, plan).working, ac.working + 4.0 * N);
  plan.reduce_per_step = false;
  plan.overlap_reduce = false;
  const ParamCounts counts = count_parameters(c.model);
  const double root = static_cast<double>(counts.embedding + counts.head + counts.ends);
  ASSERT_GT(root, static_cast<double>(counts.per_block[0]));
  EXPECT_DOUBLE_EQ(ac.working - estimate_memory(c.model, plan).working, 4.0 * root);
  // Two streams keep more than one.
  ModelConfig pre = c.model;
  pre.scheme = Scheme::PreNorm;
  EXPECT_GT(estimate_memory(c.model, MemoryPlan{}).activations,
            estimate_memory(pre, MemoryPlan{}).activations);
}
