// ModelConfig: everything that decides a model's architecture and initial weights. Plain data,
// filled from YAML by config_io.h and checked by validate(); components read only this. Each
// key's meaning is written once, in the schema of src/config/config_io.cpp (docs/config.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "normlab/nn/scheme.h"
#include "normlab/util/name_table.h"

namespace normlab {

enum class NormType { RmsNorm, LayerNorm };
enum class InitMethod { Mitchell, Normal, Megatron };
enum class OutputFusion { Code, Paper };
enum class HyperOutStd { One, SqrtN };
enum class HyperVariant { Hc, Mhc };
enum class MoeDispatch { Auto, Loop, Grouped };
enum class QkNorm { None, Full };

// clang-format off
template <> struct EnumNames<QkNorm> {
  static constexpr NameRow<QkNorm> rows[] = {{QkNorm::None, "none"}, {QkNorm::Full, "full"}};
};
template <> struct EnumNames<NormType> {
  static constexpr NameRow<NormType> rows[] = {{NormType::RmsNorm, "rmsnorm"}, {NormType::LayerNorm, "layernorm"}};
};
template <> struct EnumNames<InitMethod> {
  static constexpr NameRow<InitMethod> rows[] = {
    {InitMethod::Mitchell, "mitchell"}, {InitMethod::Normal, "normal"}, {InitMethod::Megatron, "megatron"}};
};
template <> struct EnumNames<OutputFusion> {
  static constexpr NameRow<OutputFusion> rows[] = {{OutputFusion::Code, "code"}, {OutputFusion::Paper, "paper"}};
};
template <> struct EnumNames<HyperVariant> {
  static constexpr NameRow<HyperVariant> rows[] = {{HyperVariant::Hc, "hc"}, {HyperVariant::Mhc, "mhc"}};
};
template <> struct EnumNames<MoeDispatch> {
  static constexpr NameRow<MoeDispatch> rows[] = {
    {MoeDispatch::Auto, "auto"}, {MoeDispatch::Loop, "loop"}, {MoeDispatch::Grouped, "grouped"}};
};
template <> struct EnumNames<HyperOutStd> {
  static constexpr NameRow<HyperOutStd> rows[] = {{HyperOutStd::One, "1"}, {HyperOutStd::SqrtN, "sqrt_n"}};
};
// clang-format on

/// Hyper-Connections' options (docs/schemes.md, hyper); read only by the hyper scheme (and, as
/// model.siamese.hyper, by siamese and siamese_hybrid).
struct HyperOptions {
  HyperVariant variant = HyperVariant::Hc;  // hc: Hyper-Connections; mhc: manifold-constrained
  int64_t n = 2;                            // expansion rate: 1, 2, 4 or 8 streams
  bool dynamic = true;                      // hc: DHC (true) or SHC (false)
  bool tanh = true;                         // hc: tanh on the dynamic projections
  // The init std of attn.out and mlp.down: x sqrt(n) (the Hyper-Connections paper) or x 1.
  HyperOutStd out_std_mult = HyperOutStd::SqrtN;
};

/// SiameseNorm x Hyper-Connections (docs/schemes.md): the Pre-Norm-like stream Y as n
/// hyper-streams with hyper's connections; n = 0 (the default) keeps the single Y stream.
/// Its output projections keep SiameseNorm's init by default (docs/schemes.md says why).
struct SiameseHyperOptions : HyperOptions {
  SiameseHyperOptions() {
    n = 0;
    out_std_mult = HyperOutStd::One;
  }
  bool enabled() const { return n > 0; }
};

/// SiameseNorm's ablation switches (docs/paper.md, Ablation switches); read only by siamese and
/// siamese_hybrid.
struct SiameseOptions {
  bool depth_scale = true;
  bool input_norm = true;
  OutputFusion output_fusion = OutputFusion::Code;
  SiameseHyperOptions hyper;
};

/// Mixture-of-Experts feed-forward (OLMoE/Switch style): in every `every`-th block (0, every,
/// 2 every, ...) the MLP becomes n_experts SwiGLU experts of width d_expert behind a bias-free
/// router d -> E; softmax over all E, the top_k experts of each token (token choice, dropless),
/// output sum_e p_e * expert_e(x), p renormalised over the top_k when `renormalize`. n_experts 0:
/// the dense MLP everywhere. Read by the MLP branch (moe.h), the loss and the counts.
struct MoeOptions {
  int64_t n_experts = 0;
  int64_t top_k = 8;
  int64_t d_expert = 0;  // 0 = model.d_ff
  bool renormalize = false;
  int64_t every = 1;
  double lb_loss_weight = 0.01;
  double z_loss_weight = 0.001;
  // How the experts run on their sorted rows (moe.h): a loop of one GEMM pair per expert, or
  // two grouped GEMMs for all experts; auto = grouped on CUDA where the dtype and widths allow.
  MoeDispatch dispatch = MoeDispatch::Auto;

  bool enabled() const { return n_experts > 0; }
};

struct ModelConfig {
  Scheme scheme = Scheme::PreNorm;
  int64_t vocab_size = 50304;
  int64_t d_model = 2048;
  int64_t n_layers = 16;
  int64_t n_heads = 16;
  int64_t n_kv_heads = 0;
  int64_t d_ff = 8192;
  double rope_theta = 10000.0;
  NormType norm_type = NormType::RmsNorm;
  double norm_eps = 1e-5;
  bool qkv_norm = false;
  QkNorm qk_norm = QkNorm::None;  // full: one norm over all of q, one over all of k (OLMo-2/OLMoE)
  bool tie_embeddings = false;
  InitMethod init = InitMethod::Mitchell;
  double init_std = 0.02;
  SiameseOptions siamese;
  HyperOptions hyper;
  std::optional<double> deep_norm_alpha;
  std::optional<double> deep_norm_beta;
  std::optional<int64_t> mix_ln_post_layers;
  MoeOptions moe;

  int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int64_t head_dim() const { return d_model / n_heads; }
  bool uses_qkv_norm() const { return qkv_norm || scheme_forces_qkv_norm(scheme); }
  double deep_alpha() const;
  double deep_beta() const;
  int64_t mix_post_layers() const;
  /// Whether block `layer`'s MLP is a Mixture-of-Experts layer.
  bool is_moe_layer(int64_t layer) const { return moe.enabled() && layer % moe.every == 0; }
  int64_t expert_width() const { return moe.d_expert > 0 ? moe.d_expert : d_ff; }
};

/// Throws ConfigError naming the offending `model.` key and value.
void validate(const ModelConfig& cfg);

}  // namespace normlab
