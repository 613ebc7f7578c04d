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

/// Throws CheckpointError when a floating-point tensor of `weights` holds a NaN or an infinity,
/// naming `what` (the file), the tensor, the kind and the index of its first such element, and
/// how many it holds: `model.safetensors: tensor 'lm_head.weight' holds NaN at [3, 17] (its
/// first non-finite element; 1 in all): ...`. Every reader of a weight file calls it (import,
/// --resume, --init-from, eval, export), so that a non-finite weight stops there, not as a NaN
/// loss later.
void check_finite_weights(const TensorDict& weights, const std::string& what);

/// The tensors of the safetensors file `file`, refused (check_finite_weights) when a weight is
/// not finite: how a weight file outside a run's checkpoints is read (an export folder,
/// --init-from, a Hugging Face or OLMo checkpoint).
TensorDict read_weight_file(const std::string& file);

/// "NaN", "+inf" or "-inf": how normlab's messages name the non-finite number `v`.
std::string nonfinite_name(double v);

/// "" when every element of `t` is finite (or `t` is not floating-point), else its first
/// non-finite element: "NaN at [3, 17] (its first non-finite element; 2 in all)".
std::string first_nonfinite(const torch::Tensor& t);

}  // namespace normlab
