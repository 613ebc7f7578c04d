// Private to the library: one builder per scheme (src/nn/schemes/<name>.cpp), dispatched by
// build_scheme() in scheme.cpp, plus the pieces schemes share.
#pragma once

#include <memory>

#include "normlab/nn/attention.h"
#include "normlab/nn/block.h"
#include "normlab/nn/init.h"
#include "normlab/nn/mlp.h"
#include "normlab/nn/moe.h"
#include "normlab/nn/norm.h"

namespace normlab::schemes {

// Each builds cfg.n_layers blocks and the scheme's ends on `owner`: build_<name>, one per row
// of the scheme table.
#define NORMLAB_SCHEME(name, Enum, two_stream, qkv_norm, Base) \
  SchemeParts build_##name(const ModelConfig& cfg, torch::nn::Module& owner, torch::Device device);
#include "normlab/nn/scheme_table.h"
#undef NORMLAB_SCHEME

// Single blocks that other schemes compose (Mix-LN, HybridNorm*).
std::shared_ptr<SchemeBlockImpl> make_pre_norm_block(const ModelConfig& cfg, int64_t layer,
                                                     torch::Device device);
std::shared_ptr<SchemeBlockImpl> make_post_norm_block(const ModelConfig& cfg, int64_t layer,
                                                      torch::Device device);
std::shared_ptr<SchemeBlockImpl> make_hybrid_norm_block(const ModelConfig& cfg, int64_t layer,
                                                        torch::Device device);

// ---- shared pieces ------------------------------------------------------------------------

/// Both streams start as the embedding (two-stream schemes) or only x does.
Streams enter_single(const torch::Tensor& embedding);
Streams enter_twin(const torch::Tensor& embedding);

/// A d_model-wide norm of this model, registered on `m` as `name`.
Norm add_norm(torch::nn::Module& m, const std::string& name, const ModelConfig& cfg,
              torch::Device device);

/// A block's MLP branch: the dense SwiGLU, or the Mixture-of-Experts layer where
/// cfg.is_moe_layer(layer) (either is registered as "mlp"). Called like a module: f.mlp(x).
struct FeedForward {
  Mlp dense{nullptr};
  Moe moe{nullptr};
  /// An error inside names the branch: "forward of blocks.L.mlp".
  torch::Tensor operator()(const torch::Tensor& x);
  /// Multiplies the output-path matrices (the MLP's, or every expert's, up and down; not the
  /// router) by `beta` in place: DeepNorm's init scaling.
  void scale_(double beta);
  /// Multiplies the output projections only (the MLP's down, or every expert's) by `m` in place.
  void scale_output_(double m);
};

/// The block's attention and MLP branches, registered as "attn" and "mlp" and initialised.
struct Branches {
  Attention attn{nullptr};
  FeedForward mlp;
};
Branches add_branches(torch::nn::Module& m, const ModelConfig& cfg, int64_t layer,
                      torch::Device device);

/// SiameseNorm's depth-wise scale c_l = sqrt(2(l+1)) (1 when cfg.siamese.depth_scale is off).
double siamese_depth_scale(const ModelConfig& cfg, int64_t layer);

/// The single-stream end: Z = N_final(X), final_norm registered on `owner`.
std::function<torch::Tensor(const Streams&)> final_norm_exit(const ModelConfig& cfg,
                                                             torch::nn::Module& owner,
                                                             torch::Device device);

/// SiameseNorm's end-of-network fusion, registered on `owner` (final_norm_x, final_norm_y and,
/// in the code form, final_norm):  code: Z = N(N_x(X) + N_y(Y));  paper: Z = N_x(X) + N_y(Y);
/// with model.siamese.hyper, Y is the sum of its hyper-streams.
std::function<torch::Tensor(const Streams&)> siamese_exit(const ModelConfig& cfg,
                                                          torch::nn::Module& owner,
                                                          torch::Device device);

/// SiameseNorm's entry: both streams the embedding; with model.siamese.hyper, Y as n copies of it
/// (B, T, n, C).
std::function<Streams(const torch::Tensor&)> siamese_enter(const ModelConfig& cfg);

/// make_blocks' factory for a block class constructed as Block(cfg, layer, device).
template <class Block>
std::shared_ptr<SchemeBlockImpl> block_of(const ModelConfig& cfg, int64_t layer,
                                          torch::Device device) {
  return std::make_shared<Block>(cfg, layer, device);
}

/// Builds n_layers blocks with make(cfg, layer, device).
template <class Make>
std::vector<std::shared_ptr<SchemeBlockImpl>> make_blocks(const ModelConfig& cfg,
                                                          torch::Device device, Make make) {
  std::vector<std::shared_ptr<SchemeBlockImpl>> blocks;
  for (int64_t l = 0; l < cfg.n_layers; ++l) blocks.push_back(make(cfg, l, device));
  return blocks;
}

}  // namespace normlab::schemes
