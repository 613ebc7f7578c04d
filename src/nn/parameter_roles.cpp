#include "normlab/nn/parameter_roles.h"

#include <sstream>
#include <stdexcept>

#include "normlab/nn/experts.h"
#include "normlab/nn/linear.h"
#include "normlab/nn/norm.h"

namespace normlab {

std::map<std::string, ParamRole> parameter_roles(const torch::nn::Module& model) {
  std::map<std::string, ParamRole> roles;
  for (const auto& m : model.named_modules()) {
    const torch::nn::Module& mod = *m.value();
    ParamRole role = ParamRole::Scheme;
    if (dynamic_cast<const LinearImpl*>(&mod)) role = ParamRole::Matmul;
    if (dynamic_cast<const ExpertsImpl*>(&mod)) role = ParamRole::Matmul;
    if (dynamic_cast<const EmbeddingImpl*>(&mod)) role = ParamRole::Embedding;
    if (dynamic_cast<const NormImpl*>(&mod)) role = ParamRole::Norm;
    for (const auto& p : mod.named_parameters(/*recurse=*/false))
      roles[m.key().empty() ? p.key() : m.key() + "." + p.key()] = role;
  }
  return roles;
}

std::set<std::string> parameters_kept_fp32(const torch::nn::Module& model,
                                           const std::string& keep) {
  std::set<ParamRole> kept;
  if (keep != "none") {
    std::stringstream list(keep);
    std::string item;
    while (std::getline(list, item, ',')) {
      if (item == "norms")
        kept.insert(ParamRole::Norm);
      else if (item == "scheme")
        kept.insert(ParamRole::Scheme);
      else if (item == "embeddings")
        kept.insert(ParamRole::Embedding);
      else
        throw std::invalid_argument("keep_fp32: '" + item +
                                    "' is not one of norms, scheme, embeddings, or none");
    }
  }
  std::set<std::string> names;
  for (const auto& [name, role] : parameter_roles(model))
    if (kept.count(role)) names.insert(name);
  return names;
}

}  // namespace normlab
