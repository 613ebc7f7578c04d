#include "normlab/eval/info.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "normlab/nn/model.h"
#include "normlab/util/error.h"

namespace normlab {
namespace {

int64_t total_of(const ModelConfig& cfg) {
  int64_t n = 0;
  for (const auto& p : DecoderLM(cfg, torch::kMeta)->parameters()) n += p.numel();
  return n;
}

std::string size_text(double bytes) {
  char buf[48];
  if (bytes >= 1e15)
    std::snprintf(buf, sizeof buf, "%.3g PB", bytes / 1e15);
  else
    std::snprintf(buf, sizeof buf, "%.1f GB", bytes / 1e9);
  return buf;
}

}  // namespace

ParamCounts count_parameters(const ModelConfig& cfg) {
  ParamCounts c;
  DecoderLM model(cfg, torch::kMeta);
  c.per_block.assign(static_cast<size_t>(cfg.n_layers), 0);
  for (const auto& p : model->named_parameters()) {
    const std::string& name = p.key();
    const int64_t n = p.value().numel();
    c.total += n;
    if (name.find("_hc.") != std::string::npos) c.connections += n;
    if (name == "embed.weight")
      c.embedding += n;
    else if (name == "head.weight")
      c.head += n;
    else if (name.rfind("blocks.", 0) == 0)
      c.per_block[std::stoul(name.substr(7))] += n;
    else
      c.ends += n;
  }
  c.active = c.total;
  for (const auto& [layer, moe] : model->moe) {
    const int64_t expert = (moe->experts->up.numel() + moe->experts->down.numel()) / moe->n_experts;
    c.active -= (moe->n_experts - moe->top_k) * expert;
  }
  ModelConfig base = cfg;
  base.scheme = scheme_base(cfg.scheme);
  c.base = base.scheme;
  c.base_total = base.scheme == cfg.scheme ? c.total : total_of(base);
  return c;
}

double flops_per_token(const ModelConfig& cfg, int64_t seq_len) {
  const ParamCounts c = count_parameters(cfg);
  // Tied: the embedding matrix is the head's matmul; untied: the lookup costs no FLOPs.
  const double n = static_cast<double>(cfg.tie_embeddings ? c.active : c.active - c.embedding);
  return 6.0 * n + 6.0 * static_cast<double>(cfg.n_layers * cfg.n_heads * cfg.head_dim() *
                                             seq_len);  // causal: half
}

MemoryEstimate estimate_memory(const ModelConfig& cfg, const MemoryPlan& plan) {
  const ParamCounts c = count_parameters(cfg);
  const double N = static_cast<double>(c.total);
  const double W = static_cast<double>(std::max<int64_t>(plan.world_size, 1));
  const double shard = !plan.fsdp            ? 1.0
                       : plan.shard_size > 0 ? std::min(static_cast<double>(plan.shard_size), W)
                                             : W;
  const double act_bytes = plan.bf16 ? 2.0 : 4.0;

  MemoryEstimate m;
  m.weights = 4.0 * N / shard;
  m.gradients = 4.0 * N / shard;
  m.optimizer = 8.0 * N / shard;
  const double largest_block =
      static_cast<double>(*std::max_element(c.per_block.begin(), c.per_block.end()));
  const double largest_unit =
      std::max(largest_block, static_cast<double>(c.embedding + c.head + c.ends));
  if (plan.fsdp) {
    // The unit in use, widened into fp32 module parameters, and the prefetched next one in
    // flight in the gather dtype (bf16 under autocast), plus the unit's full fp32 gradient
    // before it is reduce-scattered (and, overlapped, the previous unit's while its
    // reduce-scatter runs); reducing per step keeps every unit's gradient summed over the
    // micro-steps, unsharded. Under bf16 autocast every matmul's bf16 copy of its weight lives
    // from its block's forward to its backward (autograd saves it; with activation
    // checkpointing autocast's cast cache holds it to the end of the forward): not sharded
    // (docs/distributed.md, "Memory per rank"; tools/bench/autocast_memory.py).
    m.working = 4.0 * largest_unit + act_bytes * largest_unit +
                4.0 * largest_unit * (plan.overlap_reduce ? 2.0 : 1.0);
    if (plan.bf16) m.working += 2.0 * N;
    if (plan.reduce_per_step) m.working += 4.0 * N;
  } else if (plan.bf16) {
    m.working = 2.0 * N;  // autocast's bf16 copy of every weight matrix
  }

  // Per token and layer: what autograd keeps (fp32 inputs of norms and the c1 product,
  // compute-dtype inputs/outputs of the matmuls, the attention output and its statistics).
  const double d = static_cast<double>(cfg.d_model), dff = static_cast<double>(cfg.d_ff);
  const double H = static_cast<double>(cfg.n_heads), Hk = static_cast<double>(cfg.kv_heads());
  const double D = static_cast<double>(cfg.head_dim());
  // Hyper-Connections: hyper's n streams, or SiameseNorm's Y as n hyper-streams beside X.
  const bool siamese_hc = (cfg.scheme == Scheme::Siamese || cfg.scheme == Scheme::SiameseHybrid) &&
                          cfg.siamese.hyper.enabled();
  const bool hyper = cfg.scheme == Scheme::Hyper || siamese_hc;
  const HyperOptions& ho = siamese_hc ? cfg.siamese.hyper : cfg.hyper;
  const double n = static_cast<double>(ho.n);
  const double streams = siamese_hc                         ? 1.0 + n
                         : hyper                            ? n
                         : scheme_is_two_stream(cfg.scheme) ? 2.0
                                                            : 1.0;
  DecoderLM model(cfg, torch::kMeta);
  double vectors = 0;  // d-wide gains (norms, c1) in block 0: each keeps a fp32 d-vector
  for (const auto& p : model->scheme_blocks[0]->named_parameters())
    if (p.value().dim() == 1 && p.value().size(0) == cfg.d_model &&
        p.key().find("_hc.") == std::string::npos)
      vectors += 1;
  // Hyper-Connections, per HC layer (2 per block): the fp32 state H (n d) for the width
  // connection's matmul, and with DHC or mHC its normalised copy (n d) for the projections.
  const bool projected = ho.dynamic || ho.variant == HyperVariant::Mhc;
  const double hc = hyper ? 2.0 * 4.0 * n * d * (projected ? 2.0 : 1.0) : 0.0;
  const double qkv_rows = (H + 2 * Hk) * D;
  const double attn = act_bytes * (d + qkv_rows + (H + Hk) * D + d) +
                      (cfg.uses_qkv_norm() ? 4.0 * qkv_rows : 0.0) + 4.0 * H;
  double mlp = act_bytes * (d + 2 * dff + 2 * dff);
  if (cfg.moe.enabled()) {  // MoE layers: each token's top_k rows (gathered input, expert
    // intermediates, weighted output) and the fp32 router logits and probabilities
    const double k = static_cast<double>(cfg.moe.top_k),
                 de = static_cast<double>(cfg.expert_width());
    const double moe =
        act_bytes * (d + k * (d + 4 * de + d)) + 8.0 * static_cast<double>(cfg.moe.n_experts);
    const double n_moe = static_cast<double>(model->moe.size());
    mlp = (n_moe * moe + (static_cast<double>(cfg.n_layers) - n_moe) * mlp) /
          static_cast<double>(cfg.n_layers);
  }
  const double per_layer_token = 4.0 * d * vectors + attn + mlp + hc;
  const double tokens = static_cast<double>(plan.micro_batch * plan.seq_len);
  const double L = static_cast<double>(cfg.n_layers);
  if (plan.activation_checkpointing) {
    // Block inputs (every stream, fp32) for all layers, plus one block recomputed in full.
    m.activations = tokens * (L * 4.0 * d * streams + per_layer_token);
  } else {
    m.activations = tokens * L * per_layer_token;
  }
  m.logits = tokens * static_cast<double>(cfg.vocab_size) * (act_bytes + 4.0 + 4.0);
  return m;
}

void require_model_fits(const ModelConfig& cfg, double bytes_per_parameter, double shards,
                        double capacity, const std::string& device, const std::string& holds) {
  const ParamCounts c = count_parameters(cfg);
  const double need = bytes_per_parameter * static_cast<double>(c.total) / std::max(shards, 1.0);
  if (need <= capacity) return;
  // The key to name: the embeddings' vocabulary, the experts, an MLP far wider than usual
  // (d_ff over 8 d_model), or else the depth.
  const int64_t blocks = std::accumulate(c.per_block.begin(), c.per_block.end(), int64_t{0});
  const int64_t experts = c.total - c.active;  // the experts a token is not routed to
  std::string key = "model.n_layers = " + std::to_string(cfg.n_layers);
  if (c.embedding + c.head >= blocks)
    key = "model.vocab_size = " + std::to_string(cfg.vocab_size);
  else if (2 * experts >= blocks)
    key = "model.moe.n_experts = " + std::to_string(cfg.moe.n_experts);
  else if (cfg.expert_width() > 8 * cfg.d_model)
    key = (cfg.moe.enabled() && cfg.moe.d_expert > 0 ? "model.moe.d_expert = " : "model.d_ff = ") +
          std::to_string(cfg.expert_width());
  char params[32];
  std::snprintf(params, sizeof params, "%.3g", static_cast<double>(c.total));
  throw ConfigError(key + ": a model of " + params + " parameters (model.d_model " +
                    std::to_string(cfg.d_model) + ", " + std::to_string(cfg.n_layers) +
                    " layers) needs at least " + size_text(need) + " on each rank for " + holds +
                    ", more than the " + size_text(capacity) + " of " + device +
                    " (normlab info --config shows the estimate)");
}

}  // namespace normlab
