// ModelConfig: everything that decides a model's architecture and initial weights. Plain data,
// filled from YAML by config_io.h and checked by validate(); components read only this.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "normlab/name_table.h"
#include "normlab/scheme.h"

namespace normlab {

enum class NormType { RmsNorm, LayerNorm };
enum class InitScheme { Mitchell, Normal, Megatron };
enum class OutputFusion { Code, Paper };

// clang-format off
template <> struct EnumNames<NormType> {
  static constexpr NameRow<NormType> rows[] = {{NormType::RmsNorm, "rmsnorm"}, {NormType::LayerNorm, "layernorm"}};
};
template <> struct EnumNames<InitScheme> {
  static constexpr NameRow<InitScheme> rows[] = {
    {InitScheme::Mitchell, "mitchell"}, {InitScheme::Normal, "normal"}, {InitScheme::Megatron, "megatron"}};
};
template <> struct EnumNames<OutputFusion> {
  static constexpr NameRow<OutputFusion> rows[] = {{OutputFusion::Code, "code"}, {OutputFusion::Paper, "paper"}};
};
// clang-format on

/// SiameseNorm's ablation switches (docs/paper.md, Ablation switches); read only by siamese and
/// siamese_hybrid.
struct SiameseOptions {
  bool depth_scale = true;   // X update divided by c_l = sqrt(2(l+1)); off: c_l = 1
  bool input_norm = true;    // "normalized input fusion" N_in before each shared branch
  OutputFusion output_fusion = OutputFusion::Code;  // code: N(N_x(X)+N_y(Y)); paper: N_x(X)+N_y(Y)
};

struct ModelConfig {
  Scheme scheme = Scheme::PreNorm;
  int64_t vocab_size = 50304;
  int64_t d_model = 2048;
  int64_t n_layers = 16;
  int64_t n_heads = 16;
  int64_t n_kv_heads = 0;         // 0: same as n_heads (full multi-head); fewer: grouped-query
  int64_t d_ff = 8192;            // SwiGLU intermediate width
  double rope_theta = 10000.0;
  NormType norm_type = NormType::RmsNorm;
  double norm_eps = 1e-5;
  bool qkv_norm = false;          // per-head q/k/v norms (always on for the hybrid schemes)
  bool tie_embeddings = false;
  InitScheme init = InitScheme::Mitchell;
  double init_std = 0.02;         // base std of `normal` and `megatron`
  SiameseOptions siamese;
  std::optional<double> deep_norm_alpha;     // default (2L)^(1/4)
  std::optional<double> deep_norm_beta;      // default (8L)^(-1/4)
  std::optional<int64_t> mix_ln_post_layers; // default floor(L / 4)

  int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int64_t head_dim() const { return d_model / n_heads; }
  bool uses_qkv_norm() const { return qkv_norm || scheme_forces_qkv_norm(scheme); }
  double deep_alpha() const;
  double deep_beta() const;
  int64_t mix_post_layers() const;
};

/// Throws std::invalid_argument naming the offending `model.` key and value.
void validate(const ModelConfig& cfg);

}  // namespace normlab
