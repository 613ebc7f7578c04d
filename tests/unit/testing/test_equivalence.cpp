// The equivalence header (normlab/testing/equivalence.h): name patterns, the map's text form, the
// errors that name the parameter or the map's line, and that a report finds a difference (the
// reductions themselves are tested in tests/unit/nn/test_equivalences.cpp and test_hyper.cpp).
#include <limits>
#include <vector>

#include "normlab/nn/weights.h"
#include "normlab/testing/equivalence.h"
#include "normlab/util/error.h"
#include "support.h"

using namespace normlab;
namespace eq = normlab::equivalence;

namespace {

// The message of the ConfigError that `f` throws, or "" when it throws none.
template <class F>
std::string config_error_of(F f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(EquivalencePattern, StarIsOneRunWithoutDots) {
  std::vector<std::string> stars;
  EXPECT_TRUE(eq::pattern_matches("blocks.*.*_hc.*", "blocks.12.attn_hc.static_alpha", &stars));
  EXPECT_EQ(stars, (std::vector<std::string>{"12", "attn", "static_alpha"}));
  EXPECT_FALSE(eq::pattern_matches("blocks.*.weight", "blocks.0.attn_norm.weight"));
  EXPECT_FALSE(eq::pattern_matches("blocks.*.c1", "blocks.0.c10"));
  EXPECT_TRUE(eq::pattern_matches("final_norm.weight", "final_norm.weight"));
  EXPECT_FALSE(eq::pattern_matches("final_norm.weight", "final_norm_x.weight"));
}

TEST(EquivalenceMap, ParsesTheTextForm) {
  const auto map = eq::WeightMap::parse(
      "# comment\n\nblocks.*.attn_y_norm.weight -> blocks.*.attn_norm.weight  # rename\n"
      "a: blocks.*.c1 = 0\nb: blocks.*.*_hc.* = init\na: final_norm_x.weight = -2.5e-1\n",
      "m.map");
  ASSERT_EQ(map.rules.size(), 4u);
  EXPECT_EQ(map.rules[0].kind, eq::WeightMap::Kind::Rename);
  EXPECT_EQ(map.rules[0].target, "blocks.*.attn_norm.weight");
  EXPECT_EQ(map.rules[0].origin, "m.map:3");
  EXPECT_EQ(map.rules[1].kind, eq::WeightMap::Kind::HoldA);
  EXPECT_EQ(map.rules[1].value, 0.0);
  EXPECT_EQ(map.rules[2].kind, eq::WeightMap::Kind::HoldB);
  EXPECT_FALSE(map.rules[2].value.has_value());
  EXPECT_EQ(map.rules[3].value, -0.25);
}

TEST(EquivalenceMap, BadLinesNameTheirLine) {
  auto err = [](const std::string& text) {
    return config_error_of([&] { eq::WeightMap::parse(text, "m.map"); });
  };
  EXPECT_NE(err("\nblocks.0.c1 = 0\n").find("m.map:2: 'blocks.0.c1 = 0': expected"),
            std::string::npos);
  EXPECT_NE(err("a: blocks.*.c1 = one\n").find("m.map:1: value 'one' is neither"),
            std::string::npos);
  EXPECT_NE(err("blocks.*.x -> y\n").find("m.map:1: 'blocks.*.x -> y': both sides need"),
            std::string::npos);
  EXPECT_NE(err("b: = 1\n").find("m.map:1: empty parameter pattern"), std::string::npos);
  // a NUL byte or another control byte is named with its line and column, not cut at
  EXPECT_EQ(err(std::string("# held\na: blocks.*.c1 = 0\nblocks.*.x") + '\0' + "y -> z\n"),
            "m.map:3: a NUL byte (0x00) at column 11: a weight map is text, one rule a line");
  EXPECT_EQ(err("a: final\x01norm.weight = 1\n"),
            "m.map:1: a control byte (0x01) at column 9: a weight map is text, one rule a line");
  for (const char* v : {"nan", "inf", "-inf", "1e999"})
    EXPECT_NE(err(std::string("# held\na: blocks.*.c1 = ") + v + "\n")
                  .find(std::string("m.map:2: value '") + v + "' is not a finite number"),
              std::string::npos)
        << v;
}

// Errors name the parameter, the model and what to do.
TEST(EquivalencePair, UnmappedAndMismatchedParametersAreNamed) {
  const ModelConfig pre = test::tiny_config(Scheme::PreNorm);
  const ModelConfig post = test::tiny_config(Scheme::PostNorm);
  ModelConfig siamese = test::tiny_config(Scheme::Siamese);
  // post_norm has no final norm: pre_norm's has no counterpart, and the other way round nothing
  // reaches it
  EXPECT_NE(config_error_of([&] { eq::build_pair(pre, post); })
                .find("parameter 'final_norm.weight' of A (pre_norm) has no counterpart in B "
                      "(post_norm): B has no 'final_norm.weight'"),
            std::string::npos);
  EXPECT_NE(config_error_of([&] {
              eq::build_pair(post, pre);
            }).find("parameter 'final_norm.weight' of B (pre_norm) receives nothing"),
            std::string::npos);
  // B's extra parameters must be held or receive one of A's
  const std::string extra = config_error_of([&] { eq::build_pair(pre, siamese); });
  EXPECT_NE(extra.find("of A (pre_norm) has no counterpart in B (siamese)"), std::string::npos)
      << extra;
  ModelConfig wide = pre;
  wide.d_ff = 32;
  EXPECT_NE(config_error_of([&] { eq::build_pair(pre, wide); })
                .find("parameter 'blocks.0.mlp.up.weight' of A (pre_norm) has shape [48, 16], "
                      "'blocks.0.mlp.up.weight' of B (pre_norm) has [64, 16]"),
            std::string::npos);
  eq::WeightMap typo;
  typo.rename("blocks.*.atn_norm.weight", "blocks.*.attn_norm.weight");
  EXPECT_NE(config_error_of([&] {
              eq::build_pair(pre, pre, typo);
            }).find("'blocks.*.atn_norm.weight' matches no parameter of A (pre_norm)"),
            std::string::npos);
  eq::WeightMap twice;
  twice.rename("final_norm.weight", "blocks.0.attn_norm.weight");
  EXPECT_NE(config_error_of([&] {
              eq::build_pair(pre, pre, twice);
            }).find("parameter 'blocks.0.attn_norm.weight' of B (pre_norm) would receive both"),
            std::string::npos);
  eq::WeightMap both;
  both.fix_b("final_norm.weight", 1.0);
  EXPECT_NE(config_error_of([&] { eq::build_pair(pre, pre, both); })
                .find("parameter 'final_norm.weight' of B (pre_norm) is held, and also receives "
                      "'final_norm.weight' of A"),
            std::string::npos);
}

// The same model on both sides is equal to the last bit; one changed weight shows in the logits
// and in the gradients, and the holds land where they say.
TEST(EquivalenceReport, FindsADifferenceAndHolds) {
  const ModelConfig cfg = test::tiny_config(Scheme::PreNorm);
  eq::ModelPair pair = eq::build_pair(cfg, cfg);
  EXPECT_EQ(eq::compare(pair).worst(), 0.0);
  {
    torch::NoGradGuard no_grad;
    pair.b->named_parameters()["blocks.1.mlp.down.weight"].mul_(1.0 + 1e-6);
  }
  const eq::EquivalenceReport r = eq::compare(pair);
  EXPECT_GT(r.logits.max_rel, 1e-9);
  EXPECT_LT(r.logits.max_rel, 1e-4);
  EXPECT_GT(r.worst(), 1e-9);
  EXPECT_EQ(r.gradients.size(), weights_of(*pair.a).size());
  EXPECT_NE(r.table().find("grad blocks.1.mlp.down.weight"), std::string::npos) << r;
  EXPECT_NE(r.table().find("worst: "), std::string::npos) << r;

  eq::WeightMap map;
  map.fix_a("final_norm.weight", 0.5).fix_a("blocks.*.attn_norm.weight", eq::kInit);
  map.rename("blocks.*.mlp_norm.weight", "blocks.*.mlp_norm.weight");
  // held in A, B's parameters of those names receive nothing until B holds them too
  EXPECT_NE(config_error_of([&] { eq::build_pair(cfg, cfg, map); }).find("receives nothing"),
            std::string::npos);
  map.fix_b("final_norm.weight", 2.0).fix_b("blocks.*.attn_norm.weight", eq::kInit);
  eq::ModelPair held = eq::build_pair(cfg, cfg, map);
  const auto pa = held.a->named_parameters(), pb = held.b->named_parameters();
  EXPECT_TRUE(
      torch::equal(pa["final_norm.weight"], torch::full({cfg.d_model}, 0.5).to(torch::kDouble)));
  EXPECT_TRUE(
      torch::equal(pa["blocks.0.attn_norm.weight"], torch::ones({cfg.d_model}, torch::kDouble)));
  EXPECT_FALSE(
      torch::equal(pa["blocks.0.mlp_norm.weight"], torch::ones({cfg.d_model}, torch::kDouble)))
      << "A's other gains are drawn from U(0.5, 1.5)";
  EXPECT_TRUE(torch::equal(pb["blocks.0.mlp_norm.weight"], pa["blocks.0.mlp_norm.weight"]));
  EXPECT_TRUE(
      torch::equal(pb["final_norm.weight"], torch::full({cfg.d_model}, 2.0).to(torch::kDouble)));
  EXPECT_EQ(held.held_a.size(), 1u + 2u);  // final_norm, and attn_norm of 2 blocks
  EXPECT_EQ(held.links.size(), weights_of(*held.a).size() - 3u);
  // the final gain 0.5 against 2.0: the logits differ by a factor of 4
  const eq::EquivalenceReport h = eq::compare(held);
  EXPECT_NEAR(h.logits.max_rel, 0.75, 1e-12) << h;  // |0.5 z - 2 z| / |2 z|
  EXPECT_NE(h.table().find("held in A, not compared (3): blocks.0.attn_norm.weight=init "
                           "blocks.1.attn_norm.weight=init final_norm.weight=0.5"),
            std::string::npos)
      << h;
}

// The verdict rests on worst(): the largest row, wherever it is. A gradient that differs more
// than the logits and the loss, or any one gradient alone, is the worst row and named.
TEST(EquivalenceReport, WorstIsTheLargestRowWhereverItIs) {
  eq::EquivalenceReport r;
  r.logits = {"logits", 1e-9, 1.0, ""};
  r.loss = {"loss", 1e-8, 1.0, ""};
  r.gradients = {{"grad a", 1e-7, 1.0, ""}, {"grad b", 1e-3, 1.0, ""}, {"grad c", 1e-6, 1.0, ""}};
  EXPECT_EQ(r.worst(), 1e-3);
  EXPECT_EQ(r.worst_row().what, "grad b");
  r.gradients = {{"grad a", 0.0, 1.0, ""}, {"grad b", 0.0, 1.0, ""}, {"grad c", 0.5, 1.0, ""}};
  r.logits.max_rel = r.loss.max_rel = 0.0;
  EXPECT_EQ(r.worst(), 0.5);
  EXPECT_EQ(r.worst_row().what, "grad c");
  r.loss.max_rel = 2.0;
  EXPECT_EQ(r.worst_row().what, "loss");
}

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

torch::Tensor eq_values(std::vector<double> v) {
  return torch::tensor(v, torch::TensorOptions().dtype(torch::kDouble));
}

// A report whose logits and loss agree to 1e-12 and whose gradients are `grads` (by difference()).
eq::EquivalenceReport eq_report_with(const std::vector<eq::Difference>& grads) {
  eq::EquivalenceReport r;
  r.logits = eq::difference("logits", eq_values({1.0, 2.0}), eq_values({1.0, 2.0 + 1e-12}));
  r.loss = eq::difference("loss", eq_values({3.0}), eq_values({3.0}));
  r.gradients = grads;
  return r;
}

// MoE blocks (4 experts, top-2, renormalized) without the router's z-loss term.
ModelConfig eq_moe_config() {
  ModelConfig c = test::tiny_config(Scheme::PreNorm);
  c.moe.n_experts = 4;
  c.moe.top_k = 2;
  c.moe.d_expert = 12;
  c.moe.renormalize = true;
  c.moe.z_loss_weight = 0.0;
  return c;
}

void eq_scale_routers(DecoderLM& m, double factor) {
  torch::NoGradGuard no_grad;
  for (auto& p : m->named_parameters())
    if (p.key().find("router.weight") != std::string::npos) p.value().mul_(factor);
}

}  // namespace

// difference(): a NaN or an infinity on either side is an infinite difference, named by side and
// kind, and fails any bound; an infinity against the same infinity too (both models overflowed
// there: the comparison cannot vouch for them). Finite values keep max |a - b| / max |b|.
TEST(EquivalenceDifference, NonFiniteValuesAreAnInfiniteDifference) {
  struct Case {
    const char* name;
    std::vector<double> a, b;
    const char* nonfinite;
  };
  const std::vector<Case> cases = {
      {"NaN in A", {1.0, kNaN, 3.0}, {1.0, 2.0, 3.0}, "NaN in A"},
      {"NaN in B", {1.0, 2.0, 3.0}, {1.0, kNaN, 3.0}, "NaN in B"},
      {"NaN on both sides", {1.0, kNaN, 3.0}, {1.0, kNaN, 3.0}, "NaN in A and B"},
      {"+inf in A against finite", {1.0, kInf, 3.0}, {1.0, 2.0, 3.0}, "+inf in A"},
      {"+inf in B against finite", {1.0, 2.0, 3.0}, {1.0, kInf, 3.0}, "+inf in B"},
      {"+inf against -inf", {1.0, kInf, 3.0}, {1.0, -kInf, 3.0}, "+inf in A, -inf in B"},
      {"-inf against +inf", {1.0, -kInf, 3.0}, {1.0, kInf, 3.0}, "-inf in A, +inf in B"},
      {"+inf against the same +inf", {1.0, kInf, 3.0}, {1.0, kInf, 3.0}, "+inf in A and B"},
      {"-inf against the same -inf", {-kInf}, {-kInf}, "-inf in A and B"},
      {"NaN against +inf", {kNaN}, {kInf}, "NaN in A, +inf in B"},
  };
  for (const Case& c : cases) {
    const eq::Difference d = eq::difference("grad w", eq_values(c.a), eq_values(c.b));
    EXPECT_EQ(d.max_rel, kInf) << c.name;
    EXPECT_FALSE(d.max_rel <= 1e-10) << c.name;
    EXPECT_EQ(d.nonfinite, c.nonfinite) << c.name;
    // in a report whose other rows agree, it is the worst row, named
    const eq::EquivalenceReport r =
        eq_report_with({eq::difference("grad a", eq_values({1.0}), eq_values({1.0})), d,
                        eq::difference("grad c", eq_values({2.0}), eq_values({2.0 + 1e-9}))});
    EXPECT_EQ(r.worst(), kInf) << c.name;
    EXPECT_FALSE(r.worst() <= 1e-10) << c.name;
    EXPECT_EQ(r.worst_row().what, "grad w") << c.name;
    EXPECT_NE(r.table().find(std::string("worst: inf (grad w: ") + c.nonfinite + ")"),
              std::string::npos)
        << c.name << "\n"
        << r;
  }
  // Finite: the relative difference, 0 for equal tensors and for two zeros; no note.
  const eq::Difference same = eq::difference("x", eq_values({0.0, 0.0}), eq_values({0.0, 0.0}));
  EXPECT_EQ(same.max_rel, 0.0);
  EXPECT_EQ(same.nonfinite, "");
  const eq::Difference rel = eq::difference("x", eq_values({1.0, 4.0}), eq_values({1.0, 5.0}));
  EXPECT_DOUBLE_EQ(rel.max_rel, 0.2);
  EXPECT_EQ(rel.max_abs_b, 5.0);
  // a - b overflowing (finite both) stays an infinite difference, not a NaN
  const eq::Difference far = eq::difference("x", eq_values({1.5e308}), eq_values({-1.5e308}));
  EXPECT_EQ(far.max_rel, kInf);
  EXPECT_EQ(far.nonfinite, "");
  // float32 sides are compared in float64
  EXPECT_EQ(eq::difference("x", torch::full({2}, kNaN, torch::kFloat), torch::ones({2})).max_rel,
            kInf);
  EXPECT_THROW(eq::difference("x", torch::ones({2}), torch::ones({3})), ConfigError);
}

// A row whose max_rel is NaN (built by hand; difference() gives none) is never skipped by
// worst(): NaN > x is false, so a plain maximum would pass it.
TEST(EquivalenceReport, ANaNRowIsTheWorstRow) {
  eq::EquivalenceReport r;
  r.logits = {"logits", 1e-12, 1.0, ""};
  r.loss = {"loss", kNaN, 1.0, ""};
  r.gradients = {{"grad a", 1e-3, 1.0, ""}};
  EXPECT_FALSE(r.worst() <= 1e-10);
  EXPECT_EQ(r.worst_row().what, "loss");
  r.loss.max_rel = 0.0;
  r.gradients = {{"grad a", 1e-3, 1.0, ""}, {"grad b", kNaN, 1.0, ""}};
  EXPECT_FALSE(r.worst() <= 1e-10);
  EXPECT_EQ(r.worst_row().what, "grad b");
}

// Whole models (compare): a NaN in one gradient only, a NaN or an infinity in the logits, and a
// NaN in the loss only (the MoE router's z-loss term overflows and is weighted 0: 0 x inf) each
// fail the verdict and are the named worst row, whether on one side or both.
TEST(EquivalenceReport, NonFiniteModelsFailTheVerdictNamingTheRow) {
  const ModelConfig cfg = test::tiny_config(Scheme::PreNorm);
  {  // a NaN in one element of one gradient of B
    eq::ModelPair pair = eq::build_pair(cfg, cfg);
    pair.b->named_parameters()["blocks.1.mlp.down.weight"].register_hook([](torch::Tensor g) {
      g = g.clone();
      g.view({-1})[5] = kNaN;
      return g;
    });
    const eq::EquivalenceReport r = eq::compare(pair);
    EXPECT_EQ(r.logits.max_rel, 0.0) << r;
    EXPECT_EQ(r.loss.max_rel, 0.0) << r;
    EXPECT_FALSE(r.worst() <= 1e-10) << r;
    EXPECT_EQ(r.worst_row().what, "grad blocks.1.mlp.down.weight") << r;
    EXPECT_EQ(r.worst_row().nonfinite, "NaN in B") << r;
  }
  {  // B's head overflows: its logits are infinite (or NaN) where A's are finite
    eq::ModelPair pair = eq::build_pair(cfg, cfg);
    {
      torch::NoGradGuard no_grad;
      pair.b->named_parameters()["head.weight"].fill_(1e308);
    }
    const eq::EquivalenceReport r = eq::compare(pair);
    EXPECT_FALSE(r.worst() <= 1e-10) << r;
    EXPECT_EQ(r.worst_row().what, "logits") << r;
    EXPECT_NE(r.logits.nonfinite.find("in B"), std::string::npos) << r;
    EXPECT_EQ(r.logits.nonfinite.find("in A"), std::string::npos) << r;
  }
  {  // the same NaN weight on both sides: equal models, both NaN everywhere
    eq::ModelPair pair = eq::build_pair(cfg, cfg);
    {
      torch::NoGradGuard no_grad;
      for (DecoderLM* m : {&pair.a, &pair.b})
        (*m)->named_parameters()["blocks.0.attn.qkv.weight"].view({-1})[3] = kNaN;
    }
    const eq::EquivalenceReport r = eq::compare(pair);
    EXPECT_FALSE(r.worst() <= 1e-10) << r;
    EXPECT_EQ(r.worst_row().what, "logits") << r;
    EXPECT_EQ(r.worst_row().nonfinite, "NaN in A and B") << r;
  }
  // A NaN in the loss only. Routers scaled by 1e100 and 1e200 route alike (one-hot
  // probabilities, weights exactly 1 and 0), so the logits and the gradients agree bitwise; the
  // z-loss term, weighted 0, is 0 x 1e198 in A and 0 x inf = NaN in B.
  const ModelConfig moe = eq_moe_config();
  for (const bool both : {false, true}) {
    eq::ModelPair pair = eq::build_pair(moe, moe, {}, {});
    eq_scale_routers(pair.a, both ? 1e200 : 1e100);
    eq_scale_routers(pair.b, 1e200);
    const eq::EquivalenceReport r = eq::compare(pair);
    EXPECT_EQ(r.logits.max_rel, 0.0) << r;
    for (const eq::Difference& g : r.gradients) EXPECT_EQ(g.max_rel, 0.0) << g.what << "\n" << r;
    EXPECT_FALSE(r.worst() <= 1e-10) << r;
    EXPECT_EQ(r.worst_row().what, "loss") << r;
    EXPECT_EQ(r.worst_row().nonfinite, both ? "NaN in A and B" : "NaN in B") << r;
  }
}
