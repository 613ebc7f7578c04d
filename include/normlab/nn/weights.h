// A module's parameters as a name -> tensor dictionary, and loading one back strictly.
#pragma once

#include <torch/nn/module.h>

#include <string>

#include "normlab/util/safetensors.h"

namespace normlab {

/// The module's parameters by their stable names (blocks.0.attn.qkv.weight, ...), detached.
TensorDict weights_of(const torch::nn::Module& module);

/// Copies `weights` into the module's parameters (converting dtype and device). Strict: the
/// names must match exactly and the shapes agree, else std::invalid_argument lists the missing,
/// unexpected and mismatched names; `what` names the source in the message. Weights that name
/// MoE experts one by one (the layout before they were stacked, experts.h) are stacked first.
void load_weights(torch::nn::Module& module, const TensorDict& weights, const std::string& what);

}  // namespace normlab
