// Activation checkpointing per block: the forward keeps only each block's input streams and
// drops everything inside the block; the backward runs the block's forward again (with
// gradients, under the same autocast state) and back-propagates through that. Memory per
// block falls from all of its intermediates to its inputs, for one extra block forward in the
// backward pass. Reentrant, as torch.utils.checkpoint(use_reentrant=True): the parameters'
// gradients are accumulated by an inner backward, so the FSDP layer's gradient hooks (fsdp.h)
// fire there as usual. The blocks draw no random numbers (no dropout), so no RNG state is kept.
// Nothing here knows about the layers inside a block: an MoE layer's aux losses reach its
// router through the backward of the layer's output (nn/aux_loss.h), which the recompute runs
// like any other, and its routing is logged by the first forward only (nn/router_log.h).
#pragma once

#include "normlab/nn/block.h"
#include "normlab/nn/model.h"
#include "normlab/nn/streams.h"

namespace normlab {

/// block.forward(in) without keeping the block's intermediates for backward.
Streams activation_checkpointed_forward(SchemeBlockImpl& block, const Streams& in);

/// Which blocks a run checkpoints: every `every`-th (0, every, 2 every, ...); 0 = none, 1 = all.
inline bool activation_checkpointed(int64_t every, size_t layer) {
  return every > 0 && static_cast<int64_t>(layer) % every == 0;
}

/// Runs the blocks of a single-process model that activation_checkpointed(every, layer) picks
/// checkpointed, the others plainly (the FSDP layer does the same itself with
/// FsdpOptions::activation_checkpointing_every). Attach as DecoderLMImpl::hooks.
class ActivationCheckpointedBlocks final : public ForwardHooks {
 public:
  explicit ActivationCheckpointedBlocks(int64_t every = 1) : every_(every) {}
  Streams run_block(size_t layer, SchemeBlockImpl& block, const Streams& in) override {
    return activation_checkpointed(every_, layer) ? activation_checkpointed_forward(block, in)
                                                  : block.forward(in);
  }

 private:
  int64_t every_;
};

}  // namespace normlab
