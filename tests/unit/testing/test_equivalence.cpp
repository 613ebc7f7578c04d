// The equivalence header (normlab/testing/equivalence.h): name patterns, the map's text form, the
// errors that name the parameter or the map's line, and that a report finds a difference (the
// reductions themselves are tested in tests/unit/nn/test_equivalences.cpp and test_hyper.cpp).
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
  r.logits = {"logits", 1e-9, 1.0};
  r.loss = {"loss", 1e-8, 1.0};
  r.gradients = {{"grad a", 1e-7, 1.0}, {"grad b", 1e-3, 1.0}, {"grad c", 1e-6, 1.0}};
  EXPECT_EQ(r.worst(), 1e-3);
  EXPECT_EQ(r.worst_row().what, "grad b");
  r.gradients = {{"grad a", 0.0, 1.0}, {"grad b", 0.0, 1.0}, {"grad c", 0.5, 1.0}};
  r.logits.max_rel = r.loss.max_rel = 0.0;
  EXPECT_EQ(r.worst(), 0.5);
  EXPECT_EQ(r.worst_row().what, "grad c");
  r.loss.max_rel = 2.0;
  EXPECT_EQ(r.worst_row().what, "loss");
}
