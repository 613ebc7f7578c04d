// normlab info's numbers: parameter counts from the real module, FLOPs and memory estimates.
#include <gmock/gmock.h>

#include "normlab/config/config_io.h"
#include "normlab/eval/info.h"
#include "normlab/nn/model.h"
#include "normlab/util/error.h"
#include "support.h"

using namespace normlab;

TEST(Info, PaperSiameseHybrid13BHas128BParameters) {
  const RunConfig c = config_load(test::source_dir() + "/configs/1.3b/siamese_hybrid.yaml");
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
  const RunConfig c = config_load(test::source_dir() + "/configs/1.3b/hyper_dhc2.yaml");
  EXPECT_EQ(count_parameters(c.model).extra(), 262464);
}

// SiameseNorm x Hyper-Connections: over plain SiameseNorm, the same 2L HC layers as hyper (the
// Y stream's connections; X and the shared branches add nothing); 262,464 for 2xDHC at 1.3B.
TEST(Info, SiameseHyperExtraParametersAreHypersOverSiamese) {
  for (const Scheme s : {Scheme::Siamese, Scheme::SiameseHybrid})
    for (const bool dynamic : {false, true})
      for (const int64_t n : {1, 2, 4}) {
        const ModelConfig plain = test::tiny_config(s);
        ModelConfig m = plain;
        m.siamese.hyper.n = n;
        m.siamese.hyper.dynamic = dynamic;
        const int64_t per_layer = n * (n + 2) + (dynamic ? m.d_model * (n + 2) + 2 : 0);
        EXPECT_EQ(count_parameters(m).total - count_parameters(plain).total,
                  2 * m.n_layers * per_layer)
            << enum_name(s) << " n=" << n << " dynamic=" << dynamic;
        EXPECT_EQ(count_parameters(m).base, scheme_base(s));
      }
  const std::string dir = test::source_dir() + "/configs/1.3b/";
  const ParamCounts shc = count_parameters(config_load(dir + "siamese_hybrid_hyper.yaml").model);
  const ParamCounts plain = count_parameters(config_load(dir + "siamese_hybrid.yaml").model);
  EXPECT_EQ(shc.total - plain.total, 262464);
  EXPECT_EQ(shc.connections, 262464);  // what normlab info prints as "HC connections"
  EXPECT_EQ(plain.connections, 0);
  EXPECT_EQ(shc.extra(), plain.extra() + 262464);  // over hybrid_norm: SiameseNorm's + HC's
}

// SiameseNorm x HC: the state is X plus n Y streams, wider as n grows.
TEST(Info, SiameseHyperActivationMemoryGrowsWithN) {
  ModelConfig m = test::tiny_config(Scheme::SiameseHybrid);
  MemoryPlan plan;
  plan.activation_checkpointing = true;
  double last = estimate_memory(m, plan).activations;
  for (const int64_t n : {1, 2, 4, 8}) {
    m.siamese.hyper.n = n;
    const double a = estimate_memory(m, plan).activations;
    EXPECT_GT(a, last) << "n=" << n;
    last = a;
  }
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
  const RunConfig c = config_load(test::source_dir() + "/configs/1.3b/siamese_hybrid.yaml");
  MemoryPlan plan;
  const MemoryEstimate full = estimate_memory(c.model, plan);
  const double N = static_cast<double>(count_parameters(c.model).total);
  EXPECT_DOUBLE_EQ(full.weights + full.gradients + full.optimizer, 16.0 * N);
  plan.fsdp = true;
  plan.world_size = 8;
  const MemoryEstimate sharded = estimate_memory(c.model, plan);
  EXPECT_DOUBLE_EQ(sharded.optimizer, full.optimizer / 8);
  // Hybrid sharding over groups of 2 of the 8 ranks: the state of one shard in 2.
  plan.shard_size = 2;
  const MemoryEstimate hybrid = estimate_memory(c.model, plan);
  EXPECT_DOUBLE_EQ(hybrid.weights + hybrid.gradients + hybrid.optimizer, 16.0 * N / 2);
  EXPECT_DOUBLE_EQ(hybrid.working, sharded.working);
  plan.shard_size = 0;
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
  // bf16 autocast keeps every matmul's bf16 weight copy until its backward, sharded or not
  // (2 bytes per parameter, counted on all N), and the gather in flight is bf16 instead of fp32
  // (2 bytes less per element of the largest unit).
  const double bf16_working = estimate_memory(c.model, plan).working;
  plan.bf16 = false;
  EXPECT_DOUBLE_EQ(bf16_working - estimate_memory(c.model, plan).working, 2.0 * N - 2.0 * root);
  plan.bf16 = true;
  // Two streams keep more than one.
  ModelConfig pre = c.model;
  pre.scheme = Scheme::PreNorm;
  EXPECT_GT(estimate_memory(c.model, MemoryPlan{}).activations,
            estimate_memory(pre, MemoryPlan{}).activations);
}

// OLMoE-1B-7B's published counts, recomputed here from its published architecture (d 2048,
// 16 layers, MHA with 16 heads, 64 SwiGLU experts of 1024, top-8, router 2048 -> 64, untied
// 50304 vocabulary, RMSNorm gains: attention and MLP norms, full-width q and k norms, final):
//   per layer  4 d^2 + 64 * 3 d 1024 + 64 d + 4 d = 419,569,664
//   total      16 * that + 2 * 50304 d + d = 6,919,161,856 (the published 6.92B)
//   active     per layer 4 d^2 + 8 * 3 d 1024 + 64 d + 4 d; 1,282,017,280 (the published 1.28B)
// The config's model.qk_norm = full has OLMoE's full-width q and k norms (2 x 2048 a layer), so
// normlab's counts are the published ones exactly.
TEST(Info, OlmoeCountsMatchThePublishedTotalAndActive) {
  const RunConfig c = config_load(test::source_dir() + "/configs/moe/olmoe_1b7b.yaml");
  const ParamCounts p = count_parameters(c.model);
  const int64_t d = 2048, L = 16, V = 50304;
  const int64_t olmoe_layer = 4 * d * d + 64 * 3 * d * 1024 + 64 * d + 4 * d;
  const int64_t olmoe_active_layer = 4 * d * d + 8 * 3 * d * 1024 + 64 * d + 4 * d;
  const int64_t olmoe_total = L * olmoe_layer + 2 * V * d + d;
  const int64_t olmoe_active = L * olmoe_active_layer + 2 * V * d + d;
  ASSERT_EQ(olmoe_total, 6919161856);
  ASSERT_EQ(olmoe_active, 1282017280);
  EXPECT_EQ(c.model.qk_norm, QkNorm::Full);
  EXPECT_EQ(p.total, olmoe_total);
  EXPECT_EQ(p.active, olmoe_active);
  EXPECT_NEAR(static_cast<double>(p.total) / 1e9, 6.92, 0.005);
  EXPECT_NEAR(static_cast<double>(p.active) / 1e9, 1.28, 0.005);
}

// The stand-in 15A2B shape: 28 layers of 80 experts, the rest OLMoE's: 14.77B / 2.09B.
TEST(Info, MoeStandinCounts) {
  const RunConfig c = config_load(test::source_dir() + "/configs/moe/15a2b_standin.yaml");
  const ParamCounts p = count_parameters(c.model);
  EXPECT_NEAR(static_cast<double>(p.total) / 1e9, 14.77, 0.005);
  EXPECT_NEAR(static_cast<double>(p.active) / 1e9, 2.09, 0.005);
}

// The total and active formulas against the built model on a small config, MoE in blocks 0 and
// 2 of 4: the total is every parameter of the module; a token uses the dense blocks whole and,
// in an MoE block, the router and top_k of the E experts.
TEST(Info, MoeTotalAndActiveFormulasOnASmallModel) {
  ModelConfig m = test::tiny_config(Scheme::SiameseHybrid);
  m.n_layers = 4;
  m.moe.n_experts = 6;
  m.moe.top_k = 2;
  m.moe.d_expert = 10;
  m.moe.every = 2;
  const ParamCounts p = count_parameters(m);
  DecoderLM built(m);
  int64_t numel = 0;
  for (const auto& t : built->parameters()) numel += t.numel();
  EXPECT_EQ(p.total, numel);
  const int64_t d = m.d_model, expert = 3 * d * 10, router = 6 * d;
  const int64_t dense_mlp = 3 * d * m.d_ff;
  ModelConfig dense = m;
  dense.moe.n_experts = 0;
  const int64_t dense_total = count_parameters(dense).total;
  EXPECT_EQ(p.total, dense_total + 2 * (router + 6 * expert - dense_mlp));
  EXPECT_EQ(p.active, dense_total + 2 * (router + 2 * expert - dense_mlp));
  EXPECT_EQ(count_parameters(dense).active, dense_total);
  // FLOPs count the active parameters.
  EXPECT_DOUBLE_EQ(flops_per_token(m, 16) - flops_per_token(dense, 16),
                   6.0 * static_cast<double>(p.active - dense_total));
}

// A model too large for a device's memory is refused before anything is allocated, naming the
// key whose tensors dominate; one that fits passes.
TEST(Info, ModelsBeyondTheDevicesMemoryAreRefusedNamingTheirKey) {
  const ModelConfig tiny = test::tiny_config(Scheme::PreNorm);
  const double bytes = 16.0 * static_cast<double>(count_parameters(tiny).total);
  EXPECT_NO_THROW(require_model_fits(tiny, 16.0, 1.0, bytes, "cpu", "x"));
  EXPECT_NO_THROW(require_model_fits(tiny, 16.0, 2.0, bytes / 2, "cpu", "x"));  // FSDP's share
  auto error_of = [&](const ModelConfig& m) {
    try {
      require_model_fits(m, 16.0, 1.0, bytes, "cuda:0", "its weights");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(error_of(tiny), "(no error)");
  ModelConfig m = tiny;
  m.vocab_size *= 100;
  EXPECT_THAT(error_of(m), testing::HasSubstr("model.vocab_size = " + std::to_string(m.vocab_size) +
                                              ": a model of "));
  EXPECT_THAT(error_of(m), testing::HasSubstr("for its weights, more than the "));
  EXPECT_THAT(error_of(m), testing::HasSubstr(" of cuda:0"));
  m = tiny;
  m.n_layers *= 100;
  EXPECT_THAT(error_of(m), testing::HasSubstr("model.n_layers = " + std::to_string(m.n_layers)));
  m = tiny;
  m.d_ff *= 100;
  EXPECT_THAT(error_of(m), testing::HasSubstr("model.d_ff = " + std::to_string(m.d_ff)));
  m = tiny;
  m.moe.n_experts = 64;
  m.moe.top_k = 2;
  EXPECT_THAT(error_of(m), testing::HasSubstr("model.moe.n_experts = 64"));
}

// OLMo 2's reordered norm has Pre-Norm's count of norms (two per block and the final one, moved
// to the branch outputs) and Peri-LN's without its two input norms per block; it is its own
// base (no overhead line), as peri_norm is.
TEST(Info, ReorderedNormCountsPreNormsParametersAndPeriLnsLessTheInputNorms) {
  for (const QkNorm qk : {QkNorm::None, QkNorm::Full}) {
    ModelConfig m = test::tiny_config(Scheme::ReorderedNorm);
    m.qk_norm = qk;
    const ParamCounts p = count_parameters(m);
    EXPECT_EQ(p.base, Scheme::ReorderedNorm);
    EXPECT_EQ(p.extra(), 0);
    m.scheme = Scheme::PreNorm;
    EXPECT_EQ(p.total, count_parameters(m).total);
    m.scheme = Scheme::PeriNorm;
    EXPECT_EQ(count_parameters(m).total - p.total, 2 * m.d_model * m.n_layers);
  }
  const RunConfig c = config_load(test::source_dir() + "/configs/1.3b/reordered_norm.yaml");
  const RunConfig pre = config_load(test::source_dir() + "/configs/1.3b/base.yaml");
  EXPECT_EQ(count_parameters(c.model).total, count_parameters(pre.model).total);
}
