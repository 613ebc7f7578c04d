// Agreement with the independent PyTorch reference (tests/reference): for every golden file,
// normlab loads the reference's weights and reproduces its logits, loss and every parameter
// gradient in fp32 to 1e-5 relative (max |ours - ref| / max |ref|). The reference computed in
// float64 from the same float32 weights.
#include "normlab/nn/model.h"
#include "normlab/nn/weights.h"
#include "support.h"

using namespace normlab;
using normlab::test::close;

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, MatchesReferenceLogitsLossAndGradients) {
  const test::Golden g = test::load_golden(GetParam());
  DecoderLM model(g.config);
  TensorDict params;
  for (const auto& [name, t] : g.content.tensors)
    if (name.rfind("param.", 0) == 0) params.emplace(name.substr(6), t);
  load_weights(*model, params, GetParam());  // strict: the names are the reference's names

  const torch::Tensor tokens = g.content.tensors.at("tokens");
  const int64_t T = tokens.size(1) - 1;
  const LossOutput out = model->loss(tokens.narrow(1, 0, T), tokens.narrow(1, 1, T), g.z_loss);
  out.loss.backward();

  EXPECT_TRUE(close(out.logits, g.content.tensors.at("logits"), 1e-5)) << "logits";
  EXPECT_TRUE(close(out.loss, g.content.tensors.at("loss"), 1e-5)) << "loss";
  for (const auto& p : model->named_parameters()) {
    const auto it = g.content.tensors.find("grad." + p.key());
    ASSERT_NE(it, g.content.tensors.end()) << "no reference gradient for " << p.key();
    EXPECT_TRUE(close(p.value().grad(), it->second, 1e-5)) << "gradient of " << p.key();
  }
}

INSTANTIATE_TEST_SUITE_P(AllGoldens, GoldenTest, ::testing::ValuesIn(test::golden_names()),
                         [](const auto& info) { return info.param; });

TEST(Golden, EverySchemeHasADefaultGolden) {
  const auto names = test::golden_names();
  for (Scheme s : enum_values<Scheme>())
    EXPECT_NE(std::find(names.begin(), names.end(), std::string(enum_name(s))), names.end())
        << "tests/data/golden has no file for " << enum_name(s);
}
