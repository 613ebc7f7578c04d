// Generation: the KV cache gives the logits of a full forward pass for every scheme (one token
// at a time and in chunks), greedy generation is the same with and without it, and sampling
// respects temperature, top-k, top-p and its seed.
#include "normlab/eval/generate.h"

#include <limits>
#include <string>

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

// Sampling options out of range or not numbers are refused with the option's name (and its CLI
// flag), in a short message: never taken silently (a NaN top_p passed every comparison and
// meant 1), never a range printed with 309 digits.
TEST(Generate, RefusesSamplingOptionsOutOfRangeNamingThem) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const auto refused = [](SampleOptions o, const std::string& flag, const std::string& got) {
    const std::string m = test::error_message([&] { check_sample_options(o); });
    EXPECT_NE(m.find(flag), std::string::npos) << m;
    EXPECT_NE(m.find("got " + got), std::string::npos) << m;
    EXPECT_LT(m.size(), 160u) << m;
  };
  SampleOptions o;
  EXPECT_NO_THROW(check_sample_options(o));
  o.temperature = -1;
  refused(o, "--temperature", "-1");
  o.temperature = nan;
  refused(o, "--temperature", "nan");
  o.temperature = inf;
  refused(o, "--temperature", "inf");
  o = SampleOptions();
  o.top_p = nan;
  refused(o, "--top-p", "nan");
  o.top_p = 0.0;
  refused(o, "--top-p", "0");
  o.top_p = 1.5;
  refused(o, "--top-p", "1.5");
  o = SampleOptions();
  o.top_k = -2;
  refused(o, "--top-k", "-2");
  o = SampleOptions();
  o.max_tokens = -1;
  refused(o, "--max-tokens", "-1");
  o = SampleOptions();
  o.temperature = 0.0;
  o.top_p = 1.0;
  EXPECT_NO_THROW(check_sample_options(o));  // the bounds themselves are allowed
}

// A token count past the memory is refused before anything is allocated (it aborted the process
// in LibTorch's allocator), naming the bytes a position takes, the memory and what would fit.
TEST(Generate, RefusesATokenCountPastTheMemoryBeforeAllocating) {
  DecoderLM m = generate_model_of(Scheme::PreNorm);
  // tiny_config, 3 layers: each layer's keys and values per position, float32.
  const double per_position = KVCache::bytes(*m, 1, 1.0);
  EXPECT_EQ(per_position,
            3.0 * 2.0 * static_cast<double>(m->config.kv_heads() * m->config.head_dim()) * 4.0);
  EXPECT_EQ(KVCache::bytes(*m, 2, 10.0), 20.0 * per_position);
  // 1,000 positions fit in 2 x 1,000 x per_position bytes, 1,001 do not.
  const double memory = 2.0 * 1000.0 * per_position;
  EXPECT_NO_THROW(check_generate_fits(*m, 4, 996, memory, "cpu"));
  const std::string msg =
      test::error_message([&] { check_generate_fits(*m, 4, 997, memory, "cpu"); });
  EXPECT_NE(msg.find("--max-tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find("of memory of cpu"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at most 996 new tokens fit"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(static_cast<long long>(per_position)) + " bytes each"),
            std::string::npos)
      << msg;
  // Through generate, on this machine: a billion tokens is refused at once, the model untouched.
  SampleOptions o;
  o.max_tokens = 1000000000000LL;
  EXPECT_THROW(generate(*m, {1, 2, 3}, o), ConfigError);
  o.max_tokens = std::numeric_limits<int64_t>::max();
  EXPECT_THROW(generate(*m, {1, 2, 3}, o), ConfigError);
}
