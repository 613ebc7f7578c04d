// SiameseNorm, post-pre variant (arXiv 2602.08064, Algorithm 1 with both auxiliary
// mechanisms). Two streams from the embedding share ONE attention and ONE MLP per block; X is
// the bounded Post-Norm-like stream (post-norm deferred to the start of each sub-layer), Y the
// Pre-Norm-like stream with a clean identity path. For each sub-layer s with branch F:
//   X = N_post[s](X)
//   O = F( N_in[s]( X + N_y[s](Y) ) )        N_in: "normalized input fusion" (switchable)
//   X = X + O / c_l;   Y = Y + O             c_l = sqrt(2(l+1)), or 1 without depth scaling
//   end: Z = N(N_x(X) + N_y(Y))  (code form)   or   Z = N_x(X) + N_y(Y)  (paper form)
#include <torch/torch.h>

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
        f(add_branches(*this, cfg, layer, device)) {}

  Streams forward(const Streams& s) override {
    torch::Tensor x = s.x, y = s.y;

    x = attn_post_norm(x);
    const torch::Tensor a = f.attn(fuse(attn_in_norm, x + attn_y_norm(y)));
    x = mlp_post_norm->add_forward(x, a, c).second;  // X + A / c, then its post-norm: one op
    y = y + a;

    const torch::Tensor g = f.mlp(fuse(mlp_in_norm, x + mlp_y_norm(y)));
    x = x + g / c;
    y = y + g;
    return {x, y};
  }

  // X enters each branch post-normalized (its gain scales it), Y through its own norm.
  std::vector<BranchInputGains> input_gains() const override {
    return {{"attn", attn_post_norm->weight, attn_y_norm->weight},
            {"mlp", mlp_post_norm->weight, mlp_y_norm->weight}};
  }

  void pretty_print(std::ostream& stream) const override {
    stream << "SiameseBlock(c=" << c << (attn_in_norm ? ", input_norm" : "") << ")";
  }

  double c;
  Norm attn_post_norm, attn_y_norm, attn_in_norm, mlp_post_norm, mlp_y_norm, mlp_in_norm;
  Branches f;  // one attention, one MLP: both streams go through these

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
  if (cfg.siamese.output_fusion == OutputFusion::Paper) {
    return [nx, ny](const Streams& s) mutable { return nx(s.x) + ny(s.y); };
  }
  Norm n = add_norm(owner, "final_norm", cfg, device);
  return [nx, ny, n](const Streams& s) mutable { return n(nx(s.x) + ny(s.y)); };
}

SchemeParts build_siamese(const ModelConfig& cfg, torch::nn::Module& owner, torch::Device device) {
  auto exit = siamese_exit(cfg, owner, device);
  return {make_blocks(cfg, device, block_of<SiameseBlock>), enter_twin, exit};
}

}  // namespace normlab::schemes
