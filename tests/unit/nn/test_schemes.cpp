// Properties every registered scheme must have; parametrised over the scheme table, so a new
// scheme is covered by registering it.
#include "normlab/nn/model.h"
#include "normlab/nn/weights.h"
#include "support.h"

using namespace normlab;
using normlab::test::close;

namespace {

std::string scheme_test_name(const ::testing::TestParamInfo<Scheme>& info) {
  return std::string(enum_name(info.param));
}

torch::Tensor random_tokens(const ModelConfig& cfg, int64_t B, int64_t T, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(cfg.vocab_size, {B, T}, torch::kLong);
}

}  // namespace

class SchemeTest : public ::testing::TestWithParam<Scheme> {};

TEST_P(SchemeTest, ForwardShapesAndFiniteLogits) {
  const ModelConfig cfg = test::tiny_config(GetParam());
  DecoderLM model(cfg);
  const torch::Tensor logits = model->forward(random_tokens(cfg, 3, 7, 1));
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{3, 7, cfg.vocab_size}));
  EXPECT_TRUE(torch::isfinite(logits).all().item<bool>());
}

TEST_P(SchemeTest, DeterministicUnderASeed) {
  const ModelConfig cfg = test::tiny_config(GetParam());
  torch::manual_seed(42);
  DecoderLM a(cfg);
  torch::manual_seed(42);
  DecoderLM b(cfg);
  torch::manual_seed(43);
  DecoderLM c(cfg);
  const torch::Tensor tokens = random_tokens(cfg, 2, 5, 7);
  EXPECT_TRUE(torch::equal(a->forward(tokens), b->forward(tokens)));
  EXPECT_FALSE(torch::equal(a->forward(tokens), c->forward(tokens)));
}

TEST_P(SchemeTest, BackwardGivesFiniteGradientsToEveryParameter) {
  const ModelConfig cfg = test::tiny_config(GetParam());
  DecoderLM model(cfg);
  {  // away from the init, where a parameter may get no gradient by construction (hyper's
     // scales s multiply tanh(LN(H) W) with W = 0)
    torch::NoGradGuard no_grad;
    torch::manual_seed(4);
    for (auto& p : model->parameters()) p.add_(0.01 * torch::randn_like(p));
  }
  const torch::Tensor tokens = random_tokens(cfg, 2, 6, 3);
  const LossOutput out = model->loss(tokens, tokens.roll(-1, 1), /*z_loss=*/1e-4);
  out.loss.backward();
  for (const auto& p : model->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_TRUE(torch::isfinite(p.value().grad()).all().item<bool>()) << p.key();
    EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0.0) << p.key() << " gets no gradient";
  }
}

TEST_P(SchemeTest, CausalLogitsDoNotSeeTheFuture) {
  const ModelConfig cfg = test::tiny_config(GetParam());
  DecoderLM model(cfg);
  torch::Tensor tokens = random_tokens(cfg, 1, 6, 5);
  const torch::Tensor before = model->forward(tokens);
  tokens.index_put_({0, 5}, (tokens[0][5].item<int64_t>() + 1) % cfg.vocab_size);
  const torch::Tensor after = model->forward(tokens);
  EXPECT_TRUE(torch::allclose(before.narrow(1, 0, 5), after.narrow(1, 0, 5)));
  EXPECT_FALSE(torch::allclose(before.narrow(1, 5, 1), after.narrow(1, 5, 1)));
}

TEST_P(SchemeTest, WeightsRoundTripThroughSafetensors) {
  const ModelConfig cfg = test::tiny_config(GetParam());
  test::ScratchDir dir("weights");
  torch::manual_seed(1);
  DecoderLM a(cfg);
  safetensors_save(dir / "w.safetensors", weights_of(*a));
  torch::manual_seed(2);
  DecoderLM b(cfg);
  load_weights(*b, safetensors_load(dir / "w.safetensors").tensors, "w.safetensors");
  const torch::Tensor tokens = random_tokens(cfg, 2, 5, 9);
  EXPECT_TRUE(torch::equal(a->forward(tokens), b->forward(tokens)));
}

TEST_P(SchemeTest, MetaDeviceBuildsTheSameStructure) {
  const ModelConfig cfg = test::tiny_config(GetParam());
  DecoderLM cpu(cfg);
  DecoderLM meta(cfg, torch::kMeta);
  const auto a = cpu->named_parameters(), b = meta->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& p : a) {
    ASSERT_TRUE(b.contains(p.key())) << p.key();
    EXPECT_EQ(b[p.key()].sizes(), p.value().sizes()) << p.key();
    EXPECT_TRUE(b[p.key()].is_meta());
  }
}

// Each block, in float64 on tiny shapes: autograd's gradients with respect to the block's
// input streams and each of its parameters agree with central differences along random
// directions (the fast mode of torch.autograd.gradcheck: a wrong gradient entry shows up in
// a random projection with probability one).
TEST_P(SchemeTest, BlockGradientsMatchFiniteDifferences) {
  ModelConfig cfg = test::tiny_config(GetParam());
  cfg.d_model = 8;
  cfg.n_heads = 2;
  cfg.n_kv_heads = 1;
  cfg.d_ff = 8;
  cfg.mix_ln_post_layers = 1;  // Mix-LN: block 0 post-norm, block 1 pre-norm
  torch::manual_seed(11);
  DecoderLM model(cfg);
  model->to(torch::kDouble);
  {  // away from the init, so that no parameter's gradient is zero by construction
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.add_(0.01 * torch::randn_like(p));
  }
  const bool twin = scheme_is_two_stream(cfg.scheme);
  for (size_t l = 0; l < model->scheme_blocks.size(); ++l) {
    SCOPED_TRACE("block " + std::to_string(l));
    auto& block = *model->scheme_blocks[l];
    const auto opts = torch::TensorOptions().dtype(torch::kDouble);
    // The streams' shapes as the scheme starts them (hyper: (B, T, n, C)).
    const Streams start = model->enter(torch::zeros({1, 3, cfg.d_model}, opts));
    torch::Tensor x = torch::randn(start.x.sizes(), opts).requires_grad_();
    torch::Tensor y =
        twin ? torch::randn({1, 3, cfg.d_model}, opts).requires_grad_() : torch::Tensor();
    const torch::Tensor rx = torch::randn(start.x.sizes(), opts),
                        ry = torch::randn({1, 3, cfg.d_model}, opts);
    auto objective = [&] {
      const Streams out = block.forward({x, y});
      torch::Tensor v = (out.x * rx).sum();
      if (twin) v = v + (out.y * ry).sum();
      return v;
    };
    std::vector<torch::Tensor> inputs = {x};
    if (twin) inputs.push_back(y);
    for (auto& p : block.parameters()) inputs.push_back(p);
    const auto grads = torch::autograd::grad({objective()}, inputs);
    for (size_t i = 0; i < inputs.size(); ++i) {
      for (int k = 0; k < 3; ++k) {
        const torch::Tensor v = torch::randn_like(inputs[i]);
        const double numeric = test::directional_derivative(objective, inputs[i].detach(), v);
        const double analytic = (grads[i] * v).sum().item<double>();
        EXPECT_NEAR(analytic, numeric, 1e-6 * std::max(1.0, std::abs(numeric))) << "input " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllSchemes, SchemeTest, ::testing::ValuesIn(enum_values<Scheme>()),
                         scheme_test_name);

TEST(Scheme, NamesRoundTripAndUnknownNamesListTheValidOnes) {
  for (Scheme s : enum_values<Scheme>())
    EXPECT_EQ(enum_from_name<Scheme>(enum_name(s), "scheme"), s);
  try {
    enum_from_name<Scheme>("siamese_norm", "model.scheme");
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown model.scheme 'siamese_norm'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("siamese_hybrid"), std::string::npos);
  }
}
