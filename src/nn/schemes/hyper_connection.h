// Private to the library: one Hyper-Connections layer (the connections around one sub-layer's
// branch), shared by the hyper scheme and by SiameseNorm x Hyper-Connections
// (model.siamese.hyper). The equations and their sources are in hyper.cpp's header and
// docs/schemes.md.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <memory>
#include <string>

#include "nn/schemes/schemes.h"

namespace normlab::schemes {

/// One sub-layer's connections on the state H (B, T, n, C): width() gives the branch input h
/// (B, T, C), the carried streams H' (B, T, n, C) and the depth weights beta; depth() adds the
/// branch output O: H = beta O + H'.
class ConnectionImpl : public torch::nn::Module {
 public:
  struct Width {
    torch::Tensor h, carry, beta;
  };
  virtual Width width(const torch::Tensor& H) const = 0;

  static torch::Tensor depth(const Width& w, const torch::Tensor& o) {
    return w.beta.unsqueeze(-1) * o.unsqueeze(-2) + w.carry;
  }
};

/// The HC layer of sub-layer `sublayer` (attention 2l, MLP 2l + 1) with options `o` (HC, static
/// or dynamic, or mHC) on a d_model-wide state, its LayerNorm/RMSNorm eps `eps`, at its init.
std::shared_ptr<ConnectionImpl> make_connection(const HyperOptions& o, int64_t d_model, double eps,
                                                int64_t sublayer, torch::Device device);

/// The entry of n hyper-streams: n copies of `e` (B, T, C) as (B, T, n, C) (a broadcast view).
torch::Tensor hyper_copies(const torch::Tensor& e, int64_t n);

/// out_std_mult: the init std of the attention output and MLP down projections times sqrt(n).
void scale_hyper_outputs(Branches& f, const HyperOptions& o);

// ---- SiameseNorm's Y stream, plain or as hyper-streams (model.siamese.hyper) ---------------

/// The HC layer of sub-layer `sublayer` registered on `m` as `name`, from cfg.siamese.hyper;
/// nullptr (nothing registered) when cfg.siamese.hyper.n = 0.
std::shared_ptr<ConnectionImpl> add_siamese_connection(torch::nn::Module& m,
                                                       const std::string& name,
                                                       const ModelConfig& cfg, int64_t sublayer,
                                                       torch::Device device);

/// Y's part of the sub-layer: hc's width connection of Y, or {Y, Y, undefined} for a plain Y.
ConnectionImpl::Width read_y(const std::shared_ptr<ConnectionImpl>& hc, const torch::Tensor& y);

/// Y after the sub-layer: beta O + H' (hyper-streams), or Y + O (plain).
torch::Tensor write_y(const ConnectionImpl::Width& w, const torch::Tensor& o);

}  // namespace normlab::schemes
