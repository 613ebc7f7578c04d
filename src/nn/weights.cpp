#include "normlab/nn/weights.h"

#include "normlab/nn/experts.h"
#include "normlab/util/error.h"

#include <torch/torch.h>

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace normlab {

TensorDict weights_of(const torch::nn::Module& module) {
  TensorDict out;
  for (const auto& p : module.named_parameters(/*recurse=*/true))
    out.emplace(p.key(), p.value().detach());
  return out;
}

void load_weights(torch::nn::Module& module, const TensorDict& source, const std::string& what) {
  const TensorDict weights = stack_legacy_experts(source);
  auto params = module.named_parameters(/*recurse=*/true);
  std::ostringstream problems;
  int n_problems = 0;
  auto note = [&](const std::string& s) {
    if (n_problems++ < 12) problems << "\n  " << s;
  };
  for (const auto& p : params) {
    const auto it = weights.find(p.key());
    if (it == weights.end()) {
      note("missing: " + p.key());
    } else if (it->second.sizes() != p.value().sizes()) {
      std::ostringstream s;
      s << "shape of " << p.key() << ": " << it->second.sizes() << " in the source, "
        << p.value().sizes() << " in the model";
      note(s.str());
    }
  }
  for (const auto& [name, t] : weights)
    if (!params.contains(name)) note("unexpected: " + name);
  if (n_problems > 0) {
    throw CheckpointError(what + ": weights do not match the model (" + std::to_string(n_problems) +
                          " problems):" + problems.str());
  }
  torch::NoGradGuard no_grad;
  for (auto& p : params) p.value().copy_(weights.at(p.key()));
}

std::string nonfinite_name(double v) { return std::isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf"; }

std::string first_nonfinite(const torch::Tensor& t) {
  torch::NoGradGuard no_grad;
  if (!t.is_floating_point() || t.numel() == 0 || torch::isfinite(t).all().item<bool>()) return "";
  const torch::Tensor flat = t.reshape({-1});
  const torch::Tensor bad = torch::isfinite(flat).logical_not();
  const int64_t first = bad.nonzero().select(1, 0)[0].item<int64_t>();
  const double v = flat[first].item<double>();
  std::string index;
  for (int64_t d = t.dim() - 1, rest = first; d >= 0; --d) {
    index = std::to_string(rest % t.size(d)) + (index.empty() ? "" : ", ") + index;
    rest /= t.size(d);
  }
  return nonfinite_name(v) + " at [" + index + "] (its first non-finite element; " +
         std::to_string(bad.sum().item<int64_t>()) + " in all)";
}

void check_finite_weights(const TensorDict& weights, const std::string& what) {
  for (const auto& [name, t] : weights) {
    const std::string bad = first_nonfinite(t);
    if (!bad.empty())
      throw CheckpointError(what + ": tensor '" + name + "' holds " + bad +
                            ": weights must be finite numbers");
  }
}

TensorDict read_weight_file(const std::string& file) {
  TensorDict weights = safetensors_load(file).tensors;
  check_finite_weights(weights, file);
  return weights;
}

}  // namespace normlab
