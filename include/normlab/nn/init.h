// Weight initialisation schemes (model.init):
//   mitchell  the paper's (docs/paper.md, Initialisation), truncated normal at 3 sigma: qkv
//             and MLP input projections 1/sqrt(d); attention output 1/sqrt(2 d (l+1)); MLP
//             output 1/sqrt(2 d_ff (l+1)); embedding and untied head 1/sqrt(d)
//   normal    every matrix N(0, init_std), truncated at 3 sigma
//   megatron  as normal, with the residual output projections (attention output, MLP output)
//             scaled down to init_std / sqrt(2 L)
// Norm gains (and SiameseNorm's c1) start at 1 and are not touched here. A scheme may rescale
// its branches afterwards (DeepNorm's beta).
#pragma once

#include <torch/types.h>

#include "normlab/nn/attention.h"
#include "normlab/nn/mlp.h"
#include "normlab/nn/model_config.h"
#include "normlab/nn/moe.h"

namespace normlab {

/// Standard deviations of one block's branch weights under cfg.init.
struct BranchStds {
  double qkv;
  double attn_out;
  double mlp_up;
  double mlp_down;
};
BranchStds branch_stds(const ModelConfig& cfg, int64_t layer);

/// Standard deviation of the embedding and of the untied head.
double embedding_std(const ModelConfig& cfg);

/// Fills `w` in place from N(0, std) truncated to [-3 std, 3 std] (inverse-CDF sampling).
void trunc_normal_(torch::Tensor w, double std);

/// Initialises a block's shared branches (the attention and MLP of layer `layer`).
void init_branches(const ModelConfig& cfg, int64_t layer, AttentionImpl& attn, MlpImpl& mlp);
/// The same with a Mixture-of-Experts MLP: the router as an MLP input projection, each expert
/// as the dense MLP with d_ff = d_expert (its down projection's fan-in).
void init_branches(const ModelConfig& cfg, int64_t layer, AttentionImpl& attn, MoeImpl& moe);

}  // namespace normlab
