// What each parameter of a model is used for, as far as reduced precision is concerned: bf16
// autocast rounds the weights of matmuls (Linear) and leaves the rest in fp32 (norm gains are
// applied in fp32, the embedding is looked up, the schemes' own parameters such as SiameseNorm's
// c1 or Hyper-Connections' weights act outside autocast). FSDP's precision policy keeps the
// latter in fp32 in its gathers (distributed.keep_fp32, docs/distributed.md).
#pragma once

#include <torch/nn/module.h>

#include <map>
#include <set>
#include <string>

namespace normlab {

enum class ParamRole {
  Matmul,     // a Linear's weight (attention, MLP, router, untied head), the stacked experts
  Embedding,  // the token embedding (also the head when tied)
  Norm,       // a norm layer's gain
  Scheme,     // any other: the scheme's own scalars, vectors and matrices
};

/// Every parameter of `model` by name, with its role (by the module that registered it).
std::map<std::string, ParamRole> parameter_roles(const torch::nn::Module& model);

/// The names of the parameters whose role is listed in `keep` ("norms", "scheme",
/// "embeddings", comma-separated; "none": no parameter). Throws std::invalid_argument on
/// another word.
std::set<std::string> parameters_kept_fp32(const torch::nn::Module& model, const std::string& keep);

}  // namespace normlab
