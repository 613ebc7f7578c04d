// Validation loss and perplexity of a model on a token split.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "normlab/data/loader.h"
#include "normlab/nn/model.h"

namespace normlab {

struct EvalResult {
  double loss = 0.0;        // mean next-token cross-entropy (nats)
  double perplexity = 0.0;  // exp(loss)
  int64_t tokens = 0;       // predicted tokens
  int64_t batches = 0;
  // With token byte lengths: the same loss per byte of text, comparable across tokenizers.
  int64_t bytes = 0;              // UTF-8 bytes of the predicted tokens
  double byte_perplexity = -1.0;  // exp(total loss / bytes)
  double bits_per_byte = -1.0;    // total loss / (bytes ln 2)
  // "" when the loss is finite, else what went non-finite first: "batch 2 of 4: the loss is
  // nan; the logits hold +inf at [0, 5, 17] (...)", or "...; the logits are finite".
  std::string nonfinite;
};

/// Evaluates on the first `max_batches` batches of `loader` (0: all), without gradients;
/// `bf16_autocast` runs the model under bf16 autocast on `device`, as in training. `token_bytes`
/// (tokenizer.h, token_byte_lengths) adds the per-byte numbers.
EvalResult evaluate(DecoderLMImpl& model, const ValLoader& loader, int64_t max_batches,
                    torch::Device device, bool bf16_autocast,
                    const std::vector<int32_t>* token_bytes = nullptr);

}  // namespace normlab
