#include "normlab/nn/weights.h"

#include "normlab/nn/experts.h"
#include "normlab/util/error.h"

#include <torch/torch.h>

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

}  // namespace normlab
