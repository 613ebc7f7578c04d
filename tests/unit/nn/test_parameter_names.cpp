// Parameter names are checkpoint keys and the reference's weight names: pin them per scheme.
#include <set>

#include "normlab/nn/model.h"
#include "normlab/nn/parameter_roles.h"
#include "support.h"

using namespace normlab;

namespace {

using Names = std::set<std::string>;

Names block(int l, std::initializer_list<const char*> own, bool qkv_norm) {
  Names n;
  const std::string b = "blocks." + std::to_string(l) + ".";
  for (const char* o : own) n.insert(b + o + ".weight");
  for (const char* w : {"attn.qkv", "attn.out", "mlp.up", "mlp.down"}) n.insert(b + w + ".weight");
  if (qkv_norm)
    for (const char* w : {"attn.q_norm", "attn.k_norm", "attn.v_norm"}) n.insert(b + w + ".weight");
  return n;
}

Names expected(Scheme s) {
  Names n = {"embed.weight", "head.weight"};
  auto add = [&](const Names& more) { n.insert(more.begin(), more.end()); };
  for (int l = 0; l < 2; ++l) {
    switch (s) {
      case Scheme::PreNorm:
      case Scheme::PostNorm:
      case Scheme::DeepNorm:
      case Scheme::MixLn:
      case Scheme::ResiDual: add(block(l, {"attn_norm", "mlp_norm"}, false)); break;
      case Scheme::HybridNorm: add(block(l, {"mlp_norm"}, true)); break;
      case Scheme::HybridNormStar:
        add(l == 0 ? block(l, {"attn_norm", "mlp_norm"}, true) : block(l, {"mlp_norm"}, true));
        break;
      case Scheme::PeriNorm:
        add(block(l, {"attn_norm", "attn_out_norm", "mlp_norm", "mlp_out_norm"}, false));
        break;
      case Scheme::ReorderedNorm: add(block(l, {"attn_out_norm", "mlp_out_norm"}, false)); break;
      case Scheme::Siamese:
        add(block(l,
                  {"attn_post_norm", "attn_y_norm", "attn_in_norm", "mlp_post_norm", "mlp_y_norm",
                   "mlp_in_norm"},
                  false));
        break;
      case Scheme::Hyper: {
        add(block(l, {"attn_norm", "mlp_norm"}, false));
        for (const char* c : {"attn_hc.", "mlp_hc."})
          for (const char* w :
               {"static_alpha", "static_beta", "w_alpha", "w_beta", "s_alpha", "s_beta"})
            n.insert("blocks." + std::to_string(l) + "." + c + w);
        break;
      }
      case Scheme::SiameseHybrid: {
        add(block(l, {"attn_y_norm", "mlp_norm", "mlp_y_norm", "mlp_in_norm"}, true));
        n.insert("blocks." + std::to_string(l) + ".c1");
        break;
      }
    }
  }
  switch (s) {
    case Scheme::PostNorm:
    case Scheme::DeepNorm: break;
    case Scheme::ResiDual: n.insert("final_norm_y.weight"); break;
    case Scheme::Siamese:
    case Scheme::SiameseHybrid:
      n.insert({"final_norm_x.weight", "final_norm_y.weight", "final_norm.weight"});
      break;
    default: n.insert("final_norm.weight");
  }
  return n;
}

}  // namespace

TEST(ParameterNames, AreStablePerScheme) {
  for (Scheme s : enum_values<Scheme>()) {
    DecoderLM model(test::tiny_config(s), torch::kMeta);
    Names got;
    for (const auto& p : model->named_parameters()) got.insert(p.key());
    EXPECT_EQ(got, expected(s)) << enum_name(s);
  }
}

TEST(ParameterNames, TiedEmbeddingsHaveNoHead) {
  ModelConfig cfg = test::tiny_config(Scheme::PreNorm);
  cfg.tie_embeddings = true;
  DecoderLM model(cfg, torch::kMeta);
  EXPECT_FALSE(model->named_parameters().contains("head.weight"));
  EXPECT_TRUE(model->head_weight().is_same(model->embed->weight));
}

// What FSDP's precision policy keeps in fp32 (parameter_roles.h): every parameter has a role,
// matmuls are the Linear weights, and each scheme's own parameters are neither.
TEST(ParameterRoles, MatmulsNormsEmbeddingAndTheSchemesOwn) {
  for (const Scheme s : {Scheme::PreNorm, Scheme::SiameseHybrid, Scheme::Hyper}) {
    SCOPED_TRACE(std::string(enum_name(s)));
    ModelConfig cfg = test::tiny_config(s);
    cfg.tie_embeddings = false;
    DecoderLM model(cfg, torch::kMeta);
    const auto roles = parameter_roles(*model);
    ASSERT_EQ(roles.size(), model->named_parameters().size());
    EXPECT_EQ(roles.at("embed.weight"), ParamRole::Embedding);
    EXPECT_EQ(roles.at("head.weight"), ParamRole::Matmul);
    EXPECT_EQ(roles.at("blocks.0.attn.qkv.weight"), ParamRole::Matmul);
    EXPECT_EQ(roles.at("blocks.1.mlp.down.weight"), ParamRole::Matmul);
    EXPECT_EQ(roles.at("blocks.1.mlp_norm.weight"), ParamRole::Norm);
    int64_t scheme_own = 0;
    for (const auto& [name, role] : roles) scheme_own += role == ParamRole::Scheme;
    EXPECT_EQ(scheme_own > 0, s != Scheme::PreNorm);
    if (s == Scheme::SiameseHybrid) {
      EXPECT_EQ(roles.at("blocks.0.c1"), ParamRole::Scheme);
    }
    const auto kept = parameters_kept_fp32(*model, "norms,scheme");
    EXPECT_EQ(kept.count("blocks.1.mlp_norm.weight"), 1u);
    EXPECT_EQ(kept.count("embed.weight"), 0u);
    EXPECT_EQ(kept.count("head.weight"), 0u);
    // norms,scheme: everything but the matmuls and the embedding.
    size_t matmuls = 0;
    for (const auto& [name, role] : roles) matmuls += role == ParamRole::Matmul;
    EXPECT_EQ(kept.size(), roles.size() - matmuls - 1);
    EXPECT_TRUE(parameters_kept_fp32(*model, "none").empty());
    EXPECT_THROW(parameters_kept_fp32(*model, "norms,gains"), std::invalid_argument);
  }
}
