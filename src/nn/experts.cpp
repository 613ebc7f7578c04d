#include "normlab/nn/experts.h"

#include <torch/torch.h>

#include <map>
#include <regex>
#include <vector>

#include "normlab/kernels/ops.h"
#include "normlab/util/error.h"

namespace normlab {
namespace {

// <prefix>experts.<e>.<up|down>.weight, <prefix> empty or ending in '.'.
const std::regex& legacy_name() {
  static const std::regex re(R"(^(|.*\.)experts\.([0-9]+)\.(up|down)\.weight$)");
  return re;
}

// One legacy family's tensors by expert.
using Family = std::map<int64_t, torch::Tensor>;

torch::Tensor join_family(const std::string& name, const Family& family) {
  std::vector<torch::Tensor> parts;
  for (const auto& [e, t] : family) {
    if (e != static_cast<int64_t>(parts.size()))
      throw CheckpointError("per-expert weights of '" + name + "': expert " +
                            std::to_string(parts.size()) + " is missing");
    if (!parts.empty() && t.sizes() != parts[0].sizes())
      throw CheckpointError("per-expert weights of '" + name + "': expert " + std::to_string(e) +
                            " has another shape than expert 0");
    parts.push_back(t);
  }
  if (parts[0].dim() > 0) return torch::stack(parts);
  for (const torch::Tensor& t : parts)  // scalars (step counts): one shared value
    if (!t.equal(parts[0]))
      throw CheckpointError("per-expert values of '" + name + "' differ between experts");
  return parts[0];
}

}  // namespace

ExpertsImpl::ExpertsImpl(int64_t n_experts, int64_t d_model, int64_t d_expert,
                         torch::Device device) {
  up = register_parameter("up", torch::zeros({n_experts, 2 * d_expert, d_model}, device));
  down = register_parameter("down", torch::zeros({n_experts, d_model, d_expert}, device));
}

torch::Tensor ExpertsImpl::forward(int64_t e, const torch::Tensor& rows) {
  return swiglu_expert(rows, up[e], down[e]);
}

void ExpertsImpl::pretty_print(std::ostream& stream) const {
  stream << "normlab::Experts(" << n_experts() << " x SwiGLU " << up.size(2) << " -> " << width()
         << " -> " << down.size(1) << ")";
}

torch::Tensor swiglu_expert(const torch::Tensor& rows, const torch::Tensor& up,
                            const torch::Tensor& down) {
  return torch::linear(kernels::swiglu(torch::linear(rows, up)), down);
}

bool has_legacy_experts(const TensorDict& weights) {
  for (const auto& [name, t] : weights)
    if (std::regex_match(name, legacy_name())) return true;
  return false;
}

TensorDict stack_legacy_experts(TensorDict weights) {
  std::map<std::string, Family> families;  // stacked name -> its experts
  for (auto it = weights.begin(); it != weights.end();) {
    std::smatch m;
    if (!std::regex_match(it->first, m, legacy_name())) {
      ++it;
      continue;
    }
    families[m[1].str() + "experts." + m[3].str()][std::stoll(m[2].str())] = it->second;
    it = weights.erase(it);
  }
  for (const auto& [name, family] : families) {
    if (weights.count(name))
      throw CheckpointError("'" + name + "' is there both stacked and per expert");
    weights.emplace(name, join_family(name, family));
  }
  return weights;
}

}  // namespace normlab
