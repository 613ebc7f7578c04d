#include "normlab/nn/model_config.h"
#include "normlab/util/error.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace normlab {

double ModelConfig::deep_alpha() const {
  return deep_norm_alpha ? *deep_norm_alpha : std::pow(2.0 * static_cast<double>(n_layers), 0.25);
}

double ModelConfig::deep_beta() const {
  return deep_norm_beta ? *deep_norm_beta : std::pow(8.0 * static_cast<double>(n_layers), -0.25);
}

int64_t ModelConfig::mix_post_layers() const {
  return mix_ln_post_layers ? *mix_ln_post_layers : n_layers / 4;
}

namespace {

constexpr int64_t kMaxVocab = (int64_t{1} << 31) - 1, kMaxWidth = int64_t{1} << 20,
                  kMaxFfWidth = int64_t{1} << 24, kMaxLayers = 16384, kMaxExperts = 65536;

template <class T>
void require_model(bool ok, const char* key, const T& value, const std::string& rule) {
  if (ok) return;
  std::ostringstream msg;
  msg << "model." << key << " = " << value << ": " << rule;
  throw ConfigError(msg.str());
}

void validate_moe(const ModelConfig& c) {
  const MoeOptions& m = c.moe;
  require_model(m.n_experts >= 0 && m.n_experts <= kMaxExperts, "moe.n_experts", m.n_experts,
                "must be 0 (dense) or lie in [1, 65536]");
  if (!m.enabled()) return;
  require_model(m.top_k >= 1 && m.top_k <= m.n_experts, "moe.top_k", m.top_k,
                "must lie in [1, model.moe.n_experts (" + std::to_string(m.n_experts) + ")]");
  require_model(m.d_expert >= 0 && m.d_expert <= kMaxFfWidth, "moe.d_expert", m.d_expert,
                "must be 0 (= model.d_ff) or lie in [1, 2^24]");
  require_model(m.every >= 1, "moe.every", m.every, "must be positive (1 = every block)");
  require_model(std::isfinite(m.lb_loss_weight) && m.lb_loss_weight >= 0, "moe.lb_loss_weight",
                m.lb_loss_weight, "must be >= 0");
  require_model(std::isfinite(m.z_loss_weight) && m.z_loss_weight >= 0, "moe.z_loss_weight",
                m.z_loss_weight, "must be >= 0");
}

}  // namespace

void validate(const ModelConfig& c) {
  // Upper bounds far beyond any model trained (they keep every tensor's element count and the
  // model's construction finite; whether a model fits the machine is the trainer's check).
  require_model(c.vocab_size > 0 && c.vocab_size <= kMaxVocab, "vocab_size", c.vocab_size,
                "must lie in [1, 2^31 - 1] (token ids are 32-bit)");
  require_model(c.d_model > 0 && c.d_model <= kMaxWidth, "d_model", c.d_model,
                "must lie in [1, 2^20]");
  require_model(c.n_layers > 0 && c.n_layers <= kMaxLayers, "n_layers", c.n_layers,
                "must lie in [1, 16384]");
  require_model(c.n_heads > 0, "n_heads", c.n_heads, "must be positive");
  require_model(c.d_model % c.n_heads == 0, "d_model", c.d_model,
                "must be divisible by model.n_heads (" + std::to_string(c.n_heads) + ")");
  require_model(c.head_dim() % 2 == 0, "n_heads", c.n_heads,
                "head dimension d_model / n_heads = " + std::to_string(c.head_dim()) +
                    " must be even for RoPE");
  require_model(c.n_kv_heads >= 0, "n_kv_heads", c.n_kv_heads, "must be 0 (= n_heads) or positive");
  require_model(c.n_heads % c.kv_heads() == 0, "n_kv_heads", c.n_kv_heads,
                "must divide model.n_heads (" + std::to_string(c.n_heads) + ")");
  require_model(c.d_ff > 0 && c.d_ff <= kMaxFfWidth, "d_ff", c.d_ff, "must lie in [1, 2^24]");
  require_model(c.rope_theta > 0, "rope_theta", c.rope_theta, "must be positive");
  require_model(c.norm_eps >= 0, "norm_eps", c.norm_eps, "must be >= 0");
  require_model(c.init_std > 0, "init_std", c.init_std, "must be positive");
  if (c.deep_norm_alpha)
    require_model(*c.deep_norm_alpha > 0, "deep_norm_alpha", *c.deep_norm_alpha,
                  "must be positive");
  if (c.deep_norm_beta)
    require_model(*c.deep_norm_beta > 0, "deep_norm_beta", *c.deep_norm_beta, "must be positive");
  const int64_t n = c.hyper.n;
  require_model(n == 1 || n == 2 || n == 4 || n == 8, "hyper.n", n, "must be 1, 2, 4 or 8");
  const int64_t sn = c.siamese.hyper.n;
  require_model(sn == 0 || sn == 1 || sn == 2 || sn == 4 || sn == 8, "siamese.hyper.n", sn,
                "must be 0 (off), 1, 2, 4 or 8");
  if (c.mix_ln_post_layers)
    require_model(*c.mix_ln_post_layers >= 0 && *c.mix_ln_post_layers <= c.n_layers,
                  "mix_ln_post_layers", *c.mix_ln_post_layers, "must lie in [0, model.n_layers]");
  require_model(c.qk_norm == QkNorm::None || !c.uses_qkv_norm(), "qk_norm", "full",
                c.qkv_norm
                    ? "cannot be combined with model.qkv_norm (per-head q/k/v norms)"
                    : "cannot be combined with model.scheme = " + std::string(enum_name(c.scheme)) +
                          ", whose attention has per-head q/k/v norms");
  validate_moe(c);
}

}  // namespace normlab
