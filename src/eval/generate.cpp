#include "normlab/eval/generate.h"
#include "normlab/util/error.h"

#include <torch/torch.h>

#include <stdexcept>

#include "normlab/nn/kv_cache.h"

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

std::vector<int64_t> generate(DecoderLMImpl& model, const std::vector<int64_t>& prompt,
                              const SampleOptions& o,
                              const std::function<bool(int64_t)>& on_token) {
  if (prompt.empty()) throw ConfigError("generate: the prompt needs at least one token");
  if (o.max_tokens < 0) throw ConfigError("generate: max_tokens must be >= 0");
  if (o.top_p <= 0.0 || o.top_p > 1.0) throw ConfigError("generate: top_p must be in (0, 1]");
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const torch::Device device = model.embed->weight.device();
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
