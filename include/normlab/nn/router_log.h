// What the routers of a model's MoE layers (moe.h) did, for logging and diagnostics only: no
// tensor here carries a gradient (the aux losses' gradients reach the routers through the MoE
// output, moe_aux_loss.h). Each layer records one RouterStats per forward pass. The log keeps
// every layer's latest record (the loss and the diagnostics read it) and, while a step is open
// (begin_step() .. take_step()), every pass of the step in order: the per-step accumulator the
// trainer empties each step. A forward run inside a backward pass (activation checkpointing's
// recompute) records nothing: the block's first forward recorded the same routing.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace normlab {

/// One MoE layer's routing in one forward pass (detached).
struct RouterStats {
  torch::Tensor lb;       // () load-balancing loss E sum_e f_e P_e
  torch::Tensor z;        // () router z-loss, mean over tokens of logsumexp(logits)^2
  torch::Tensor counts;   // (E) int64 assignments per expert
  torch::Tensor entropy;  // () mean router entropy over tokens, nats
};

/// One pass over a model's MoE layers: lb and z summed in layer order and divided by the number
/// of layers (the loss's average), the mean of the layers' entropies, and counts stacked to
/// (layers, E).
RouterStats mean_over_layers(const std::vector<RouterStats>& pass);

class RouterLog {
 public:
  /// Layer `layer` (0-based among the model's MoE layers) routed a pass. Layer 0, or a layer not
  /// above the previous record's, starts a new pass of the step.
  void record(int64_t layer, RouterStats stats);
  /// The latest record of `layer`; throws std::out_of_range when it has none.
  const RouterStats& last(int64_t layer) const;
  /// Starts collecting the passes of a step (what an earlier step left is dropped).
  void begin_step();
  /// The passes recorded since begin_step(), each with one RouterStats per MoE layer in layer
  /// order; stops collecting and empties the step.
  std::vector<std::vector<RouterStats>> take_step();
  /// Passes collected in the open step (0 when none is open).
  size_t step_passes() const { return step_.size(); }

 private:
  std::vector<RouterStats> last_;
  std::vector<std::vector<RouterStats>> step_;
  bool collecting_ = false;
  int64_t previous_ = -1;  // the layer of the previous record
};

}  // namespace normlab
