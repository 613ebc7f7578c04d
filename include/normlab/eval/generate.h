// Text generation from a trained model: temperature, top-k and top-p (nucleus) sampling with a
// seeded generator, greedy decoding at temperature 0, and a KV cache (kv_cache.h) so that each
// new token costs one position of compute.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "normlab/nn/model.h"

namespace normlab {

struct SampleOptions {
  double temperature = 0.8;  // 0: greedy (argmax)
  int64_t top_k = 0;         // keep the k most likely tokens; 0: all
  double top_p = 1.0;        // keep the smallest set whose probability reaches p; 1: all
  uint64_t seed = 0;
  int64_t max_tokens = 128;  // new tokens at most
  int64_t stop_token = -1;   // end early after this token (EOS); -1: never
  int64_t vocab_limit = 0;   // draw only ids below it (a model's vocabulary padded beyond its
                             // tokenizer's, as 50,304 for GPT-NeoX's 50,277); 0: all
  bool use_cache = true;     // false: recompute the whole sequence for every token (tests)
};

/// The next token of `logits` (V) under `options`, drawing from `gen`.
int64_t sample_next(const torch::Tensor& logits, const SampleOptions& options, at::Generator& gen);

/// Throws ConfigError naming the option (and its CLI flag) when a sampling option is out of range
/// or not a number: max_tokens < 0, temperature not finite or < 0, top_p not in (0, 1], top_k < 0.
void check_sample_options(const SampleOptions& options);

/// Throws ConfigError when continuing `prompt_tokens` by `max_tokens` needs more than
/// `memory_bytes` (the device's memory, named `where` in the message): the KV cache of every
/// position and as much again for the forward passes, computed before anything is allocated.
/// The message gives the bytes a position takes and how many new tokens would fit.
void check_generate_fits(const DecoderLMImpl& model, int64_t prompt_tokens, int64_t max_tokens,
                         double memory_bytes, const std::string& where);

/// Continues `prompt` (at least one token) with up to max_tokens new tokens; `on_token` sees
/// each one as it is chosen (streaming) and may return false to stop. Returns the new tokens.
/// Checks the options and the memory first (check_sample_options, check_generate_fits).
std::vector<int64_t> generate(DecoderLMImpl& model, const std::vector<int64_t>& prompt,
                              const SampleOptions& options,
                              const std::function<bool(int64_t)>& on_token = nullptr);

}  // namespace normlab
