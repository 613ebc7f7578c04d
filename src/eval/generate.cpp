#include "normlab/eval/generate.h"
#include "normlab/util/error.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <string>

#include "normlab/nn/kv_cache.h"
#include "normlab/util/device.h"

namespace normlab {

int64_t sample_next(const torch::Tensor& logits_in, const SampleOptions& o, at::Generator& gen) {
  torch::Tensor logits = logits_in.to(torch::kFloat).reshape({-1});
  if (o.vocab_limit > 0 && o.vocab_limit < logits.size(0))
    logits = logits.slice(0, 0, o.vocab_limit);
  if (o.temperature <= 0.0) return logits.argmax().item<int64_t>();
  logits = logits / o.temperature;
  if (o.top_k > 0 && o.top_k < logits.size(0)) {
    const torch::Tensor kth = std::get<0>(logits.topk(o.top_k)).min();
    logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
  }
  if (o.top_p < 1.0) {
    const auto [sorted, order] = logits.sort(/*dim=*/-1, /*descending=*/true);
    const torch::Tensor cum = sorted.softmax(-1).cumsum(-1);
    // Drop a token when the tokens before it already reach top_p (the first is always kept).
    const torch::Tensor drop_sorted = (cum - sorted.softmax(-1)) >= o.top_p;
    const torch::Tensor drop = torch::zeros_like(drop_sorted).scatter(0, order, drop_sorted);
    logits = logits.masked_fill(drop, -std::numeric_limits<float>::infinity());
  }
  const torch::Tensor probs = logits.softmax(-1);
  return torch::multinomial(probs, 1, /*replacement=*/false, gen).item<int64_t>();
}

void check_sample_options(const SampleOptions& o) {
  const auto number = [](double v) {
    std::ostringstream s;
    s << v;
    return s.str();
  };
  if (o.max_tokens < 0)
    throw ConfigError("generate: max_tokens (--max-tokens) must be >= 0: got " +
                      std::to_string(o.max_tokens));
  if (!std::isfinite(o.temperature) || o.temperature < 0.0)
    throw ConfigError(
        "generate: temperature (--temperature) must be a finite number >= 0 "
        "(0: greedy): got " +
        number(o.temperature));
  if (!std::isfinite(o.top_p) || o.top_p <= 0.0 || o.top_p > 1.0)
    throw ConfigError("generate: top_p (--top-p) must be a number in (0, 1] (1: all tokens): got " +
                      number(o.top_p));
  if (o.top_k < 0)
    throw ConfigError("generate: top_k (--top-k) must be >= 0 (0: all tokens): got " +
                      std::to_string(o.top_k));
}

void check_generate_fits(const DecoderLMImpl& model, int64_t prompt_tokens, int64_t max_tokens,
                         double memory_bytes, const std::string& where) {
  const double positions = static_cast<double>(prompt_tokens) + static_cast<double>(max_tokens);
  const double per_position = KVCache::bytes(model, 1, 1.0, model.embed->weight.scalar_type());
  // The cache holds every position; the forward passes need about as much again (the
  // recomputing path holds each layer's keys and values for the whole sequence).
  const double need = 2.0 * per_position * positions;
  if (need <= memory_bytes) return;
  const double fit =
      std::floor(memory_bytes / (2.0 * per_position)) - static_cast<double>(prompt_tokens);
  const auto whole = [](double v) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(0) << v;
    return s.str();
  };
  const auto gib = [](double b) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(1) << b / (1024.0 * 1024.0 * 1024.0) << " GiB";
    return s.str();
  };
  throw ConfigError(
      "generate: max_tokens (--max-tokens) " + std::to_string(max_tokens) + " after a prompt of " +
      std::to_string(prompt_tokens) + " tokens needs the keys and values of " + whole(positions) +
      " positions, " + std::to_string(static_cast<long long>(per_position)) +
      " bytes each for this model (and as " + "much again for the forward passes): " + gib(need) +
      ", more than the " + gib(memory_bytes) + " of memory of " + where + "; at most " +
      std::to_string(static_cast<long long>(std::max(0.0, fit))) + " new tokens fit");
}

std::vector<int64_t> generate(DecoderLMImpl& model, const std::vector<int64_t>& prompt,
                              const SampleOptions& o,
                              const std::function<bool(int64_t)>& on_token) {
  if (prompt.empty()) throw ConfigError("generate: the prompt needs at least one token");
  check_sample_options(o);
  const torch::Device device = model.embed->weight.device();
  check_generate_fits(model, static_cast<int64_t>(prompt.size()), o.max_tokens,
                      device_capacity_bytes(device), device.str());
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  at::Generator gen = at::detail::createCPUGenerator(o.seed);
  const auto as_tensor = [&](const std::vector<int64_t>& ids) {
    return torch::tensor(ids, torch::kLong).unsqueeze(0).to(device);
  };

  std::vector<int64_t> seq = prompt, out;
  std::unique_ptr<KVCache> cache;
  std::unique_ptr<KVCacheScope> scope;
  if (o.use_cache) {
    cache = std::make_unique<KVCache>(model, 1, static_cast<int64_t>(prompt.size()) + o.max_tokens,
                                      device, model.embed->weight.scalar_type());
    scope = std::make_unique<KVCacheScope>(model, *cache);
  }
  torch::Tensor logits =
      model.forward(as_tensor(prompt)).select(1, -1).squeeze(0);  // the prompt, once
  for (int64_t i = 0; i < o.max_tokens; ++i) {
    const int64_t next = sample_next(logits.cpu(), o, gen);
    out.push_back(next);
    seq.push_back(next);
    if (on_token && !on_token(next)) break;
    if (next == o.stop_token || i + 1 == o.max_tokens) break;
    const torch::Tensor input = o.use_cache ? as_tensor({next}) : as_tensor(seq);
    logits = model.forward(input).select(1, -1).squeeze(0);
  }
  scope.reset();
  model.train(was_training);
  return out;
}

}  // namespace normlab
