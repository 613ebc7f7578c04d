#include "normlab/evaluate.h"

#include <torch/torch.h>

#include <cmath>

#include "normlab/autocast.h"

namespace normlab {

EvalResult evaluate(DecoderLMImpl& model, const ValLoader& loader, int64_t max_batches, torch::Device device,
                    bool bf16_autocast) {
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  EvalResult r;
  const int64_t n = max_batches > 0 ? std::min(max_batches, loader.num_batches()) : loader.num_batches();
  double sum = 0.0;  // sum of per-token losses
  for (int64_t k = 0; k < n; ++k) {
    const Batch b = loader.batch(k);
    torch::Tensor ce;
    {
      AutocastGuard autocast(bf16_autocast);
      ce = model.loss(b.inputs.to(device), b.targets.to(device)).ce;
    }
    const int64_t tokens = b.targets.numel();
    sum += ce.item<double>() * static_cast<double>(tokens);
    r.tokens += tokens;
    ++r.batches;
  }
  model.train(was_training);
  r.loss = r.tokens > 0 ? sum / static_cast<double>(r.tokens) : std::nan("");
  r.perplexity = std::exp(r.loss);
  return r;
}

}  // namespace normlab
