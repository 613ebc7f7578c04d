// Agreement of the Mixture-of-Experts model with its independent PyTorch reference
// (tests/reference/moe_ref.py, written from the OLMoE / Switch description): for every file of
// tests/data/golden_moe (pre_norm and siamese_hybrid with MoE, top-1 and top-2, renormalised or
// not, MoE in every second block, heavy aux weights, and batches where experts get no token),
// normlab loads the reference's float32 weights and reproduces its logits, its loss (cross-
// entropy + the weighted aux losses), the load-balancing and router z-loss values, and the
// gradient of every parameter (zero for an expert that got no token).
//
// The bounds are the dense goldens' (test_golden.cpp), for the same reasons: float32 runs within
// 3e-5 of each tensor's largest magnitude (float32 rounding of the same computation); float64
// runs per element within 1e-10 relative plus 1e-13 of the tensor's largest magnitude (float64
// from the same inputs, only the order of operations differs: here also the order in which the
// experts' rows are gathered and summed). The routing is discrete: a tie between two experts'
// probabilities within rounding would change it, which these random weights do not produce.
#include "normlab/nn/model.h"
#include "normlab/nn/weights.h"
#include "support.h"

using namespace normlab;

namespace {

struct MoeGoldenRun {
  LossOutput out;
  std::vector<std::pair<std::string, torch::Tensor>> grads;
};

MoeGoldenRun run_moe_golden(const std::string& name, const test::Golden& g,
                            torch::ScalarType dtype) {
  DecoderLM model(g.config);
  TensorDict params;
  for (const auto& [key, t] : g.content.tensors)
    if (key.rfind("param.", 0) == 0) params.emplace(key.substr(6), t);
  load_weights(*model, params, name);  // strict: the reference's names are the model's
  model->to(dtype);
  const torch::Tensor tokens = g.content.tensors.at("tokens");
  const int64_t T = tokens.size(1) - 1;
  MoeGoldenRun r;
  r.out = model->loss(tokens.narrow(1, 0, T), tokens.narrow(1, 1, T), g.z_loss);
  r.out.loss.backward();
  for (const auto& p : model->named_parameters()) r.grads.emplace_back(p.key(), p.value().grad());
  return r;
}

class MoeGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeGoldenTest, Float32MatchesReference) {
  const test::Golden g = test::load_golden(GetParam(), "golden_moe");
  ASSERT_TRUE(g.config.moe.enabled());
  const MoeGoldenRun r = run_moe_golden(GetParam(), g, torch::kFloat);
  const auto& ref = g.content.tensors;
  EXPECT_TRUE(test::close(r.out.logits, ref.at("logits"), 3e-5));
  EXPECT_TRUE(test::close(r.out.loss, ref.at("loss"), 3e-5));
  EXPECT_TRUE(test::close(r.out.lb, ref.at("lb"), 3e-5));
  EXPECT_TRUE(test::close(r.out.router_z, ref.at("router_z"), 3e-5));
  for (const auto& [name, grad] : r.grads) {
    ASSERT_TRUE(grad.defined()) << "no gradient for " << name;
    EXPECT_TRUE(test::close(grad, ref.at("grad." + name), 3e-5)) << name;
  }
}

TEST_P(MoeGoldenTest, Float64MatchesReferencePerElement) {
  const test::Golden g = test::load_golden(GetParam(), "golden_moe");
  const MoeGoldenRun r = run_moe_golden(GetParam(), g, torch::kDouble);
  const auto& ref = g.content.tensors;
  const auto check = [](const torch::Tensor& ours, const torch::Tensor& theirs) {
    return test::close_per_element(ours, theirs, 1e-10, 1e-13);
  };
  EXPECT_TRUE(check(r.out.logits, ref.at("logits")));
  EXPECT_TRUE(check(r.out.loss, ref.at("loss")));
  EXPECT_TRUE(check(r.out.lb, ref.at("lb")));
  EXPECT_TRUE(check(r.out.router_z, ref.at("router_z")));
  size_t zero = 0;
  for (const auto& [name, grad] : r.grads) {
    ASSERT_TRUE(grad.defined()) << "no gradient for " << name;
    ASSERT_EQ(grad.scalar_type(), torch::kDouble) << name;
    EXPECT_TRUE(check(grad, ref.at("grad." + name))) << name;
    // An expert's slice of the stacked experts.up / experts.down (or a whole matrix) all zero.
    const torch::Tensor per = grad.dim() == 3 ? grad.flatten(1).abs().amax(1) : grad.abs().max();
    zero += static_cast<size_t>(per.eq(0.0).sum().item<int64_t>());
  }
  // The starved cases hold experts with no token: their gradients are zero on both sides.
  if (GetParam().find("starved") != std::string::npos) {
    EXPECT_GT(zero, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(AllMoeGoldens, MoeGoldenTest,
                         ::testing::ValuesIn(test::golden_names("golden_moe")),
                         [](const auto& info) { return info.param; });

}  // namespace
