// SiameseNorm, hybrid-pre variant (arXiv 2602.08064; the variant behind the paper's language
// model numbers): X is a HybridNorm stream, Y a Pre-Norm stream, ONE attention and ONE MLP.
//   attention:  H = c1 * X + N_attn_y(Y)             c1: learnable per-channel vector, init 1
//               A = Attn_qkvnorm(H);   X = X + A / c_l;   Y = Y + A
//   MLP:        X~ = N_mlp(X)                        HybridNorm post-norm of the X main path
//               G = MLP( N_mlp_in( X~ + N_mlp_y(Y) ) ) N_mlp_in: normalized input fusion
//               Y = Y + G;   X = X~ + G / c_l
//   end: Z = N(N_x(X) + N_y(Y))  (code form)   or   Z = N_x(X) + N_y(Y)  (paper form)
#include <torch/torch.h>

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
        f(add_branches(*this, cfg, layer, device)) {}

  Streams forward(const Streams& s) override {
    torch::Tensor x = s.x, y = s.y;

    const torch::Tensor a = f.attn(c1 * x + attn_y_norm(y));
    // The residual adds and the norms after them, each pair one op (fused on CUDA):
    // X~ = N_mlp(X + A / c), Y = Y + A with N_mlp_y(Y), H = X~ + N_mlp_y(Y) with N_mlp_in(H).
    const torch::Tensor xt = mlp_norm->add_forward(x, a, c).second;
    torch::Tensor ny;
    std::tie(y, ny) = mlp_y_norm->add_forward(y, a);
    const torch::Tensor g = f.mlp(mlp_in_norm ? mlp_in_norm->add_forward(xt, ny).second : xt + ny);
    y = y + g;
    x = xt + g / c;
    return {x, y};
  }

  // Attention: c1 scales X, attn_y_norm's gain Y; MLP: X enters as N_mlp(X), Y as N_mlp_y(Y).
  std::vector<BranchInputGains> input_gains() const override {
    return {{"attn", c1, attn_y_norm->weight}, {"mlp", mlp_norm->weight, mlp_y_norm->weight}};
  }

  void pretty_print(std::ostream& stream) const override {
    stream << "SiameseHybridBlock(c=" << c << (mlp_in_norm ? ", input_norm" : "") << ")";
  }

  double c;
  torch::Tensor c1;  // (C)
  Norm attn_y_norm, mlp_norm, mlp_y_norm, mlp_in_norm;
  Branches f;  // one attention (with q/k/v norms), one MLP: both streams go through these
};

}  // namespace

SchemeParts build_siamese_hybrid(const ModelConfig& cfg, torch::nn::Module& owner,
                                 torch::Device device) {
  auto exit = siamese_exit(cfg, owner, device);
  return {make_blocks(cfg, device, block_of<SiameseHybridBlock>), enter_twin, exit};
}

}  // namespace normlab::schemes
