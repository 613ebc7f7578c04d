// Validation loss and perplexity of a model on a token split.
#pragma once

#include <cstdint>

#include "normlab/loader.h"
#include "normlab/model.h"

namespace normlab {

struct EvalResult {
  double loss = 0.0;        // mean next-token cross-entropy (nats)
  double perplexity = 0.0;  // exp(loss)
  int64_t tokens = 0;       // predicted tokens
  int64_t batches = 0;
};

/// Evaluates on the first `max_batches` batches of `loader` (0: all), without gradients;
/// `bf16_autocast` runs the model under CUDA bf16 autocast, as in training.
EvalResult evaluate(DecoderLMImpl& model, const ValLoader& loader, int64_t max_batches, torch::Device device,
                    bool bf16_autocast);

}  // namespace normlab
