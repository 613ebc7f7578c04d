// DecoderLM: the decoder-only language model around a normalization scheme.
//   tokens -> Embedding -> enter -> L scheme blocks -> exit (end fusion, Z) -> LM head -> logits
// Parameter names are stable checkpoint keys: embed.weight, blocks.<l>.<...>, the scheme's end
// norms (final_norm, final_norm_x, final_norm_y), head.weight (absent when tied).
// Shapes: B = batch, T = sequence, C = d_model, V = vocabulary.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <memory>
#include <vector>

#include "normlab/nn/block.h"
#include "normlab/nn/linear.h"
#include "normlab/nn/model_config.h"
#include "normlab/nn/moe.h"
#include "normlab/nn/router_log.h"
#include "normlab/nn/streams.h"

namespace normlab {

struct LossOutput {
  torch::Tensor loss;      // () cross-entropy + weighted aux terms: what backward() is called on
                           // (the aux terms' gradients come from the MoE layers, moe.h)
  torch::Tensor ce;        // () mean cross-entropy
  torch::Tensor z;         // () mean logsumexp^2 (unweighted); only when z_loss > 0
  torch::Tensor logits;    // (B, T, V); undefined from the chunked loss
  torch::Tensor lb;        // () MoE load-balancing loss, mean over MoE layers (unweighted,
                           // no gradient)
  torch::Tensor router_z;  // () MoE router z-loss, mean over MoE layers (unweighted, no gradient)
};

/// A layer applied to a built model (FSDP, fsdp.h) sees its forward pass through these: before
/// the embedding, around each block, and on the logits. The defaults do nothing.
class ForwardHooks {
 public:
  virtual ~ForwardHooks() = default;
  virtual void before_forward() {}
  virtual Streams run_block(size_t layer, SchemeBlockImpl& block, const Streams& in) {
    return block.forward(in);
  }
  virtual torch::Tensor after_forward(torch::Tensor logits) { return logits; }
};

class DecoderLMImpl : public torch::nn::Module {
 public:
  /// Builds and initialises the model with its parameters created on `device` (the meta device
  /// builds the structure without allocating). cfg is validated first.
  explicit DecoderLMImpl(const ModelConfig& cfg, torch::Device device = torch::kCPU);

  /// The fused output Z that feeds the head, (B, T) token ids -> (B, T, C). skip_block >= 0
  /// leaves that block out (its streams pass through unchanged): the pruning diagnostic.
  torch::Tensor hidden(const torch::Tensor& tokens, const Probe& probe = nullptr,
                       int64_t skip_block = -1);
  /// The scheme's end-of-network fusion of `s` into Z (the logit lens applies it to one stream).
  torch::Tensor fuse(const Streams& s) const;
  /// The streams the scheme starts from, given the embedding output (B, T, C).
  Streams enter(const torch::Tensor& embedding) const;
  /// Logits (B, T, V).
  torch::Tensor forward(const torch::Tensor& tokens, const Probe& probe = nullptr);
  /// Logits and the mean next-token loss against `targets` (B, T); z_loss weights
  /// mean(logsumexp(logits)^2). Cross-entropy is computed in fp32. chunk_rows > 0: the loss
  /// through linear_cross_entropy (loss.h) in chunks of that many rows, without logits. With
  /// MoE layers the loss adds model.moe's lb_loss_weight * lb + z_loss_weight * router_z, whose
  /// gradients the MoE layers inject themselves (moe.h): a caller that backpropagates s * loss
  /// sets set_moe_loss_scale(s) first.
  LossOutput loss(const torch::Tensor& tokens, const torch::Tensor& targets, double z_loss = 0.0,
                  const Probe& probe = nullptr, int64_t chunk_rows = 0);

  /// The head weight in use: head.weight, or embed.weight when tied.
  torch::Tensor head_weight() const;

  /// The factor the MoE layers scale their aux losses' gradients by: the one the caller
  /// backpropagates the loss with (default 1; 0 leaves the aux losses out of the gradients).
  void set_moe_loss_scale(double scale);
  double moe_loss_scale() const { return moe_loss_scale_; }

  ModelConfig config;
  Embedding embed{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  Linear head{nullptr};                                         // untied only
  std::vector<std::shared_ptr<SchemeBlockImpl>> scheme_blocks;  // the same blocks, typed
  std::vector<std::pair<int64_t, MoeImpl*>> moe;  // (block, layer) of every MoE MLP, in order
  std::shared_ptr<RouterLog> router_log;          // what the MoE layers' routers did (router_log.h)
  ForwardHooks* hooks = nullptr;  // set by a layer that wraps the model (owned by it); none: plain

 private:
  void add_moe_losses(LossOutput& out) const;

  SchemeParts parts_;  // enter/exit of the scheme (its blocks live in scheme_blocks)
  double moe_loss_scale_ = 1.0;
};
TORCH_MODULE(DecoderLM);

}  // namespace normlab
