// SiameseNorm, hybrid-pre variant (arXiv 2602.08064; the variant behind the paper's language
// model numbers): X is a HybridNorm stream, Y a Pre-Norm stream, ONE attention and ONE MLP.
//   attention:  H = c1 * X + N_attn_y(Y)             c1: learnable per-channel vector, init 1
//               A = Attn_qkvnorm(H);   X = X + A / c_l;   Y = Y + A
//   MLP:        X~ = N_mlp(X)                        HybridNorm post-norm of the X main path
//               G = MLP( N_mlp_in( X~ + N_mlp_y(Y) ) ) N_mlp_in: normalized input fusion
//               Y = Y + G;   X = X~ + G / c_l
//   end: Z = N(N_x(X) + N_y(Y))  (code form)   or   Z = N_x(X) + N_y(Y)  (paper form)
// With Hyper-Connections on Y (model.siamese.hyper.n = n > 0; docs/schemes.md), Y is n
// hyper-streams (B, T, n, C) and each sub-layer an HC layer of hyper.cpp around the shared branch:
// the width connection's h = A_m^T Y takes Y's place in the branch input (N_attn_y(h),
// N_mlp_y(h)), and Y = beta O + A_r^T Y replaces Y = Y + O (O = A, then G); X is unchanged.
//   enter: Y = n copies of the embedding;  end: sum_i Y_i takes Y's place in the fusion.
#include <torch/torch.h>

#include "nn/schemes/hyper_connection.h"
#include "nn/schemes/schemes.h"

namespace normlab::schemes {
namespace {

class SiameseHybridBlock : public SchemeBlockImpl {
 public:
  SiameseHybridBlock(const ModelConfig& cfg, int64_t layer, torch::Device device)
      : c(siamese_depth_scale(cfg, layer)),
        c1(register_parameter("c1", torch::ones({cfg.d_model}, device))),
        attn_y_norm(add_norm(*this, "attn_y_norm", cfg, device)),
        mlp_norm(add_norm(*this, "mlp_norm", cfg, device)),
        mlp_y_norm(add_norm(*this, "mlp_y_norm", cfg, device)),
        mlp_in_norm(cfg.siamese.input_norm ? add_norm(*this, "mlp_in_norm", cfg, device) : nullptr),
        f(add_branches(*this, cfg, layer, device)),
        attn_hc(add_siamese_connection(*this, "attn_hc", cfg, 2 * layer, device)),
        mlp_hc(add_siamese_connection(*this, "mlp_hc", cfg, 2 * layer + 1, device)) {
    if (attn_hc) scale_hyper_outputs(f, cfg.siamese.hyper);
  }

  Streams forward(const Streams& s) override {
    torch::Tensor x = s.x, y = s.y;

    auto w = read_y(attn_hc, y);  // w.h: Y, or A_m^T Y of the hyper-streams
    const torch::Tensor a = f.attn(c1 * x + attn_y_norm(w.h));
    // The residual adds and the norms after them, each pair one op (fused on CUDA):
    // X~ = N_mlp(X + A / c), Y = Y + A with N_mlp_y(Y), H = X~ + N_mlp_y(Y) with N_mlp_in(H).
    const torch::Tensor xt = mlp_norm->add_forward(x, a, c).second;
    torch::Tensor ny;
    if (mlp_hc) {  // Y = beta A + A_r^T Y, then the MLP's width connection reads it
      y = write_y(w, a);
      w = read_y(mlp_hc, y);
      ny = mlp_y_norm(w.h);
    } else {
      std::tie(y, ny) = mlp_y_norm->add_forward(y, a);
      w = read_y(mlp_hc, y);
    }
    const torch::Tensor g = f.mlp(mlp_in_norm ? mlp_in_norm->add_forward(xt, ny).second : xt + ny);
    y = write_y(w, g);  // Y + G, or beta G + A_r^T Y
    x = xt + g / c;
    return {x, y};
  }

  // Attention: c1 scales X, attn_y_norm's gain Y; MLP: X enters as N_mlp(X), Y as N_mlp_y(Y).
  std::vector<BranchInputGains> input_gains() const override {
    return {{"attn", c1, attn_y_norm->weight}, {"mlp", mlp_norm->weight, mlp_y_norm->weight}};
  }

  void pretty_print(std::ostream& stream) const override {
    stream << "SiameseHybridBlock(c=" << c << (mlp_in_norm ? ", input_norm" : "")
           << (attn_hc ? ", hyper-streams" : "") << ")";
  }

  double c;
  torch::Tensor c1;  // (C)
  Norm attn_y_norm, mlp_norm, mlp_y_norm, mlp_in_norm;
  Branches f;  // one attention (with q/k/v norms), one MLP: both streams go through these
  std::shared_ptr<ConnectionImpl> attn_hc, mlp_hc;  // Y's HC layers, or null
};

}  // namespace

SchemeParts build_siamese_hybrid(const ModelConfig& cfg, torch::nn::Module& owner,
                                 torch::Device device) {
  auto exit = siamese_exit(cfg, owner, device);
  return {make_blocks(cfg, device, block_of<SiameseHybridBlock>), siamese_enter(cfg), exit};
}

}  // namespace normlab::schemes
