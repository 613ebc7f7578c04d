// Auxiliary losses that act through the gradient alone, as Megatron-LM's MoEAuxLossAutoScaler:
//   y' = with_aux_gradients(y, {a_1, ..., a_n}, {g_1, ..., g_n})
// is y in the forward pass; in the backward pass y's gradient goes through unchanged and each
// a_i receives g_i, the gradient it would get if its weighted term were part of the loss being
// backpropagated. A layer's aux losses so reach its parameters with the backward of its output,
// wherever that output goes (through activation checkpointing's recompute too), and nothing
// outside the layer carries them to the loss. The loss then adds their values without
// gradient, for logging.
#pragma once

#include <torch/types.h>

#include <vector>

namespace normlab {

/// y, with each aux[i] given the gradient grads[i] (same shape and dtype; no gradient of its
/// own) when y's gradient is computed. Without grad mode, or when no aux requires a gradient,
/// y itself.
torch::Tensor with_aux_gradients(const torch::Tensor& y, const std::vector<torch::Tensor>& aux,
                                 const std::vector<torch::Tensor>& grads);

/// The gradient of a, one of the n terms of loss_scale * (L + weight * (a_1 + ... + a_n) / n),
/// in a's dtype and on its device: ((1 * loss_scale) * weight) / n, the operations autograd
/// applies to that expression in its order, so that it is bitwise the gradient the added term
/// would give (L: anything a does not enter; loss_scale: the factor the caller backpropagates
/// the loss with, 1 / micro-steps in the trainer).
torch::Tensor aux_loss_gradient(const torch::Tensor& a, double loss_scale, double weight,
                                int64_t n);

}  // namespace normlab
