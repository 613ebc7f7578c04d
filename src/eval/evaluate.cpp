#include "normlab/eval/evaluate.h"

#include <torch/torch.h>

#include <cmath>

#include "normlab/nn/autocast.h"
#include "normlab/nn/weights.h"

namespace normlab {

EvalResult evaluate(DecoderLMImpl& model, const ValLoader& loader, int64_t max_batches,
                    torch::Device device, bool bf16_autocast,
                    const std::vector<int32_t>* token_bytes) {
  torch::Tensor byte_table;
  if (token_bytes) byte_table = torch::tensor(*token_bytes, torch::kLong);
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  EvalResult r;
  const int64_t n =
      max_batches > 0 ? std::min(max_batches, loader.num_batches()) : loader.num_batches();
  double sum = 0.0;  // sum of per-token losses
  for (int64_t k = 0; k < n; ++k) {
    const Batch b = loader.batch(k);
    LossOutput out;
    {
      AutocastGuard autocast(device.type(), bf16_autocast);
      out = model.loss(b.inputs.to(device), b.targets.to(device));
    }
    const int64_t tokens = b.targets.numel();
    const double ce = out.ce.item<double>();
    if (!std::isfinite(ce) && r.nonfinite.empty()) {
      const std::string logits = first_nonfinite(out.logits);
      r.nonfinite = "batch " + std::to_string(k + 1) + " of " + std::to_string(n) +
                    ": the loss is " + nonfinite_name(ce) + "; the logits " +
                    (logits.empty() ? "are finite" : "hold " + logits);
    }
    sum += ce * static_cast<double>(tokens);
    r.tokens += tokens;
    ++r.batches;
    if (token_bytes) {
      TORCH_CHECK(b.targets.max().item<int64_t>() < byte_table.size(0),
                  "evaluate: a token id beyond the tokenizer's ", byte_table.size(0), " pieces");
      r.bytes += byte_table.index_select(0, b.targets.reshape({-1})).sum().item<int64_t>();
    }
  }
  model.train(was_training);
  r.loss = r.tokens > 0 ? sum / static_cast<double>(r.tokens) : std::nan("");
  r.perplexity = std::exp(r.loss);
  if (token_bytes && r.bytes > 0) {
    const double total = sum;
    r.byte_perplexity = std::exp(total / static_cast<double>(r.bytes));
    r.bits_per_byte = total / (static_cast<double>(r.bytes) * std::log(2.0));
  }
  return r;
}

}  // namespace normlab
