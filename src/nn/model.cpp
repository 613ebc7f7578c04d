#include "normlab/nn/model.h"

#include <torch/torch.h>

#include "normlab/kernels/ops.h"
#include "normlab/nn/init.h"
#include "normlab/nn/loss.h"
#include "normlab/util/library_error.h"

namespace normlab {

DecoderLMImpl::DecoderLMImpl(const ModelConfig& cfg, torch::Device device) : config(cfg) {
  validate(config);
  embed = register_module("embed", Embedding(cfg.vocab_size, cfg.d_model, device));
  trunc_normal_(embed->weight, embedding_std(cfg));

  blocks = register_module("blocks", torch::nn::ModuleList());
  parts_ = build_scheme(cfg, *this, device);  // registers the scheme's end norms on *this
  scheme_blocks = std::move(parts_.blocks);
  for (const auto& b : scheme_blocks) blocks->push_back(b);
  for (size_t l = 0; l < scheme_blocks.size(); ++l)
    for (MoeImpl* m : moe_layers(*scheme_blocks[l])) moe.emplace_back(static_cast<int64_t>(l), m);
  router_log = std::make_shared<RouterLog>();
  for (size_t i = 0; i < moe.size(); ++i) {
    moe[i].second->log = router_log;
    moe[i].second->index = static_cast<int64_t>(i);
  }

  if (!cfg.tie_embeddings) {
    head = register_module("head", Linear(cfg.d_model, cfg.vocab_size, device));
    trunc_normal_(head->weight, embedding_std(cfg));
  }
}

torch::Tensor DecoderLMImpl::head_weight() const {
  return config.tie_embeddings ? embed->weight : head->weight;
}

torch::Tensor DecoderLMImpl::fuse(const Streams& s) const { return parts_.exit(s); }

Streams DecoderLMImpl::enter(const torch::Tensor& embedding) const {
  return parts_.enter(embedding);
}

torch::Tensor DecoderLMImpl::hidden(const torch::Tensor& tokens, const Probe& probe,
                                    int64_t skip_block) {
  TORCH_CHECK(tokens.dim() == 2, "DecoderLM: tokens must be (B, T), got ", tokens.sizes());
  if (hooks) hooks->before_forward();
  Streams s;
  try {
    s = parts_.enter(embed(tokens));
  } catch (...) {
    rethrow_with_context("forward of the embedding");
  }
  auto observe = [&](int64_t layer) {
    if (!probe) return;
    probe("x", layer, s.x);
    if (s.y.defined()) probe("y", layer, s.y);
  };
  observe(-1);
  for (size_t l = 0; l < scheme_blocks.size(); ++l) {
    if (static_cast<int64_t>(l) != skip_block) {
      try {
        s = hooks ? hooks->run_block(l, *scheme_blocks[l], s) : scheme_blocks[l]->forward(s);
      } catch (...) {
        rethrow_with_context("forward of blocks." + std::to_string(l));
      }
    }
    observe(static_cast<int64_t>(l));
  }
  torch::Tensor z;
  try {
    z = parts_.exit(s);
  } catch (...) {
    rethrow_with_context("forward of the final fusion");
  }
  if (probe) probe("z", config.n_layers, z);
  return z;
}

torch::Tensor DecoderLMImpl::forward(const torch::Tensor& tokens, const Probe& probe) {
  const torch::Tensor z = hidden(tokens, probe);
  torch::Tensor logits;
  try {
    logits = kernels::linear(z, head_weight());
  } catch (...) {
    rethrow_with_context("forward of the LM head");
  }
  return hooks ? hooks->after_forward(std::move(logits)) : logits;
}

LossOutput DecoderLMImpl::loss(const torch::Tensor& tokens, const torch::Tensor& targets,
                               double z_loss, const Probe& probe, int64_t chunk_rows) {
  TORCH_CHECK(targets.sizes() == tokens.sizes(), "DecoderLM::loss: targets ", targets.sizes(),
              " must match tokens ", tokens.sizes());
  LossOutput out;
  if (chunk_rows > 0) {
    const torch::Tensor z = hidden(tokens, probe);
    const ChunkedLoss c = linear_cross_entropy(z.reshape({-1, config.d_model}), head_weight(),
                                               targets.reshape({-1}), z_loss, chunk_rows);
    if (hooks) hooks->after_forward(torch::Tensor());
    out.loss = c.loss;
    out.ce = c.ce;
    out.z = c.z;
    add_moe_losses(out);
    return out;
  }
  out.logits = forward(tokens, probe);
  const torch::Tensor flat = out.logits.reshape({-1, config.vocab_size});
  // The loss in fp32 (fp64 in fp64 runs): bf16 logits on the CPU go to the kernel as they are
  // (it computes in fp32 and returns an fp32 loss), the rest are converted first.
  const bool bf16_kernel = flat.scalar_type() == torch::kBFloat16 && kernels::cpu_fusable(flat);
  const auto logits32 = [&] {
    return flat.scalar_type() == torch::kDouble ? flat : flat.to(torch::kFloat);
  };
  out.ce = kernels::cross_entropy(bf16_kernel ? flat : logits32(), targets.reshape({-1}));
  out.loss = out.ce;
  if (z_loss > 0.0) {
    out.z = torch::logsumexp(logits32(), /*dim=*/-1).pow(2).mean();
    out.loss = out.ce + z_loss * out.z;
  }
  add_moe_losses(out);
  return out;
}

void DecoderLMImpl::set_moe_loss_scale(double scale) {
  moe_loss_scale_ = scale;
  for (const auto& [layer, m] : moe) m->loss_scale = scale;
}

// The values of the aux losses of the forward just run, averaged over the MoE layers (from the
// router log, without gradient: the MoE layers inject their gradients themselves, moe.h).
void DecoderLMImpl::add_moe_losses(LossOutput& out) const {
  if (moe.empty()) return;
  std::vector<RouterStats> pass;
  for (size_t i = 0; i < moe.size(); ++i) pass.push_back(router_log->last(static_cast<int64_t>(i)));
  const RouterStats mean = mean_over_layers(pass);
  out.lb = mean.lb;
  out.router_z = mean.z;
  out.loss =
      out.loss + config.moe.lb_loss_weight * out.lb + config.moe.z_loss_weight * out.router_z;
}

}  // namespace normlab
