// SiameseNorm, post-pre variant (arXiv 2602.08064, Algorithm 1 with both auxiliary
// mechanisms). Two streams from the embedding share ONE attention and ONE MLP per block; X is
// the bounded Post-Norm-like stream (post-norm deferred to the start of each sub-layer), Y the
// Pre-Norm-like stream with a clean identity path. For each sub-layer s with branch F:
//   X = N_post[s](X)
//   O = F( N_in[s]( X + N_y[s](Y) ) )        N_in: "normalized input fusion" (switchable)
//   X = X + O / c_l;   Y = Y + O             c_l = sqrt(2(l+1)), or 1 without depth scaling
//   end: Z = N(N_x(X) + N_y(Y))  (code form)   or   Z = N_x(X) + N_y(Y)  (paper form)
// With Hyper-Connections on Y (model.siamese.hyper.n = n > 0; docs/schemes.md), Y is n
// hyper-streams (B, T, n, C) and each sub-layer an HC layer of hyper.cpp around the shared branch:
//   h = A_m^T Y,  Y' = A_r^T Y,  beta         the width connection (hyper_connection.h)
//   O = F( N_in[s]( X + N_y[s](h) ) )        h takes Y's place in the branch input
//   Y = beta O + Y'                          X as above
//   enter: Y = n copies of the embedding;  end: sum_i Y_i takes Y's place in the fusion.
#include <torch/torch.h>

#include "nn/schemes/hyper_connection.h"
#include "nn/schemes/schemes.h"

namespace normlab::schemes {
namespace {

class SiameseBlock : public SchemeBlockImpl {
 public:
  SiameseBlock(const ModelConfig& cfg, int64_t layer, torch::Device device)
      : c(siamese_depth_scale(cfg, layer)),
        attn_post_norm(add_norm(*this, "attn_post_norm", cfg, device)),
        attn_y_norm(add_norm(*this, "attn_y_norm", cfg, device)),
        attn_in_norm(cfg.siamese.input_norm ? add_norm(*this, "attn_in_norm", cfg, device)
                                            : nullptr),
        mlp_post_norm(add_norm(*this, "mlp_post_norm", cfg, device)),
        mlp_y_norm(add_norm(*this, "mlp_y_norm", cfg, device)),
        mlp_in_norm(cfg.siamese.input_norm ? add_norm(*this, "mlp_in_norm", cfg, device) : nullptr),
        f(add_branches(*this, cfg, layer, device)),
        attn_hc(add_siamese_connection(*this, "attn_hc", cfg, 2 * layer, device)),
        mlp_hc(add_siamese_connection(*this, "mlp_hc", cfg, 2 * layer + 1, device)) {
    if (attn_hc) scale_hyper_outputs(f, cfg.siamese.hyper);
  }

  Streams forward(const Streams& s) override {
    torch::Tensor x = s.x, y = s.y;

    x = attn_post_norm(x);
    auto w = read_y(attn_hc, y);  // w.h: Y, or A_m^T Y of the hyper-streams
    const torch::Tensor a = f.attn(fuse(attn_in_norm, x + attn_y_norm(w.h)));
    x = mlp_post_norm->add_forward(x, a, c).second;  // X + A / c, then its post-norm: one op
    y = write_y(w, a);                               // Y + A, or beta A + A_r^T Y

    w = read_y(mlp_hc, y);
    const torch::Tensor g = f.mlp(fuse(mlp_in_norm, x + mlp_y_norm(w.h)));
    x = x + g / c;
    y = write_y(w, g);
    return {x, y};
  }

  // X enters each branch post-normalized (its gain scales it), Y through its own norm.
  std::vector<BranchInputGains> input_gains() const override {
    return {{"attn", attn_post_norm->weight, attn_y_norm->weight},
            {"mlp", mlp_post_norm->weight, mlp_y_norm->weight}};
  }

  void pretty_print(std::ostream& stream) const override {
    stream << "SiameseBlock(c=" << c << (attn_in_norm ? ", input_norm" : "")
           << (attn_hc ? ", hyper-streams" : "") << ")";
  }

  double c;
  Norm attn_post_norm, attn_y_norm, attn_in_norm, mlp_post_norm, mlp_y_norm, mlp_in_norm;
  Branches f;  // one attention, one MLP: both streams go through these
  std::shared_ptr<ConnectionImpl> attn_hc, mlp_hc;  // Y's HC layers, or null

 private:
  static torch::Tensor fuse(Norm& in_norm, const torch::Tensor& h) {
    return in_norm ? in_norm(h) : h;
  }
};

}  // namespace

std::function<torch::Tensor(const Streams&)> siamese_exit(const ModelConfig& cfg,
                                                          torch::nn::Module& owner,
                                                          torch::Device device) {
  Norm nx = add_norm(owner, "final_norm_x", cfg, device);
  Norm ny = add_norm(owner, "final_norm_y", cfg, device);
  std::function<torch::Tensor(const Streams&)> fuse;
  if (cfg.siamese.output_fusion == OutputFusion::Paper) {
    fuse = [nx, ny](const Streams& s) mutable { return nx(s.x) + ny(s.y); };
  } else {
    Norm n = add_norm(owner, "final_norm", cfg, device);
    fuse = [nx, ny, n](const Streams& s) mutable { return n(nx(s.x) + ny(s.y)); };
  }
  if (!cfg.siamese.hyper.enabled()) return fuse;
  // Hyper-streams: their sum takes Y's place, as hyper's end sums its streams.
  return [fuse](const Streams& s) { return fuse({s.x, s.y.sum(-2)}); };
}

std::function<Streams(const torch::Tensor&)> siamese_enter(const ModelConfig& cfg) {
  if (!cfg.siamese.hyper.enabled()) return enter_twin;
  const int64_t n = cfg.siamese.hyper.n;
  return [n](const torch::Tensor& e) -> Streams { return {e, hyper_copies(e, n)}; };
}

SchemeParts build_siamese(const ModelConfig& cfg, torch::nn::Module& owner, torch::Device device) {
  auto exit = siamese_exit(cfg, owner, device);
  return {make_blocks(cfg, device, block_of<SiameseBlock>), siamese_enter(cfg), exit};
}

}  // namespace normlab::schemes
