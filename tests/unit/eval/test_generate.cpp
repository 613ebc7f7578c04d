// Generation: the KV cache gives the logits of a full forward pass for every scheme (one token
// at a time and in chunks), greedy generation is the same with and without it, and sampling
// respects temperature, top-k, top-p and its seed.
#include "normlab/eval/generate.h"
#include "normlab/nn/kv_cache.h"
#include "normlab/util/error.h"
#include "support.h"

using namespace normlab;

namespace {

DecoderLM generate_model_of(Scheme s) {
  ModelConfig c = test::tiny_config(s);
  c.n_layers = 3;
  torch::manual_seed(7);
  DecoderLM m(c);
  m->eval();
  return m;
}

}  // namespace

class GenerateScheme : public ::testing::TestWithParam<Scheme> {};

TEST_P(GenerateScheme, CachedLogitsEqualAFullForwardPass) {
  DecoderLM m = generate_model_of(GetParam());
  torch::NoGradGuard g;
  torch::manual_seed(3);
  const torch::Tensor tokens = torch::randint(0, 32, {2, 11}, torch::kLong);
  const torch::Tensor full = m->forward(tokens);
  KVCache cache(*m, 2, 11, torch::kCPU);
  torch::Tensor pieces;
  {
    KVCacheScope scope(*m, cache);
    const torch::Tensor a = m->forward(tokens.narrow(1, 0, 5));  // the prompt
    const torch::Tensor b = m->forward(tokens.narrow(1, 5, 1));  // one token
    const torch::Tensor c = m->forward(tokens.narrow(1, 6, 5));  // a chunk after a prefix
    pieces = torch::cat({a, b, c}, 1);
  }
  EXPECT_EQ(cache.length(), 11);
  EXPECT_TRUE(test::close(pieces, full, 1e-5)) << enum_name(GetParam());
  // The scope detached the cache: a plain forward is a plain forward again.
  EXPECT_TRUE(torch::equal(m->forward(tokens), full));
}

TEST_P(GenerateScheme, GreedyWithTheCacheEqualsWithout) {
  DecoderLM m = generate_model_of(GetParam());
  SampleOptions o;
  o.temperature = 0.0;
  o.max_tokens = 12;
  const std::vector<int64_t> prompt = {1, 5, 9, 4};
  const auto cached = generate(*m, prompt, o);
  o.use_cache = false;
  const auto plain = generate(*m, prompt, o);
  EXPECT_EQ(cached.size(), 12u);
  EXPECT_EQ(cached, plain) << enum_name(GetParam());
}

INSTANTIATE_TEST_SUITE_P(AllSchemes, GenerateScheme, ::testing::ValuesIn(enum_values<Scheme>()),
                         [](const auto& info) { return std::string(enum_name(info.param)); });

TEST(Generate, SamplingFollowsItsOptions) {
  const torch::Tensor logits = torch::tensor({1.0f, 3.0f, 2.0f, 0.5f, 2.9f});
  at::Generator gen = at::detail::createCPUGenerator(1);
  SampleOptions o;
  o.temperature = 0.0;
  EXPECT_EQ(sample_next(logits, o, gen), 1);  // greedy
  o.temperature = 1.0;
  o.top_k = 2;  // only 1 and 4 can come out
  std::set<int64_t> seen;
  for (int i = 0; i < 200; ++i) seen.insert(sample_next(logits, o, gen));
  EXPECT_EQ(seen, (std::set<int64_t>{1, 4}));
  o.top_k = 0;
  o.top_p = 0.3;  // the top token alone holds more than 0.3 of the mass
  for (int i = 0; i < 50; ++i) EXPECT_EQ(sample_next(logits, o, gen), 1);
  o.top_p = 1.0;
  seen.clear();
  for (int i = 0; i < 400; ++i) seen.insert(sample_next(logits, o, gen));
  EXPECT_EQ(seen.size(), 5u);
  o.vocab_limit = 4;  // a tokenizer of 4 ids under a model of 5: id 4 never comes out
  seen.clear();
  for (int i = 0; i < 400; ++i) seen.insert(sample_next(logits, o, gen));
  EXPECT_EQ(seen, (std::set<int64_t>{0, 1, 2, 3}));
  o.temperature = 0.0;
  o.vocab_limit = 1;
  EXPECT_EQ(sample_next(logits, o, gen), 0);  // greedy within the limit
  o.vocab_limit = 0;
  // The same seed, the same text.
  DecoderLM m = generate_model_of(Scheme::SiameseHybrid);
  SampleOptions s;
  s.seed = 42;
  s.max_tokens = 10;
  EXPECT_EQ(generate(*m, {1, 2}, s), generate(*m, {1, 2}, s));
  s.stop_token = generate(*m, {1, 2}, s)[3];
  EXPECT_LE(generate(*m, {1, 2}, s).size(), 4u);  // stops at the stop token
  EXPECT_THROW(generate(*m, {}, s), ConfigError);
}

// Mixture-of-Experts blocks route each token on its own (token choice, dropless), so the KV
// cache gives the full pass's logits too, and greedy generation is the same with and without it.
TEST(Generate, MoeCachedLogitsEqualAFullForwardPass) {
  for (const Scheme s : {Scheme::PreNorm, Scheme::SiameseHybrid}) {
    SCOPED_TRACE(enum_name(s));
    ModelConfig c = test::tiny_config(s);
    c.moe.n_experts = 4;
    c.moe.top_k = 2;
    c.moe.d_expert = 8;
    torch::manual_seed(7);
    DecoderLM m(c);
    m->eval();
    torch::NoGradGuard g;
    const torch::Tensor tokens = torch::randint(0, 32, {2, 9}, torch::kLong);
    const torch::Tensor full = m->forward(tokens);
    KVCache cache(*m, 2, 9, torch::kCPU);
    torch::Tensor pieces;
    {
      KVCacheScope scope(*m, cache);
      const torch::Tensor a = m->forward(tokens.narrow(1, 0, 4));
      const torch::Tensor b = m->forward(tokens.narrow(1, 4, 1));
      const torch::Tensor rest = m->forward(tokens.narrow(1, 5, 4));
      pieces = torch::cat({a, b, rest}, 1);
    }
    EXPECT_TRUE(test::close(pieces, full, 1e-5));
    SampleOptions o;
    o.temperature = 0.0;
    o.max_tokens = 8;
    const auto cached = generate(*m, {1, 5, 9}, o);
    o.use_cache = false;
    EXPECT_EQ(cached, generate(*m, {1, 5, 9}, o));
  }
}
