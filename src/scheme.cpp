// build_scheme: the one factory from Scheme to its builder in src/schemes/.
#include <torch/torch.h>

#include "normlab/block.h"
#include "schemes/schemes.h"

namespace normlab {

SchemeParts build_scheme(const ModelConfig& cfg, torch::nn::Module& owner, torch::Device device) {
  using namespace schemes;
  switch (cfg.scheme) {
    case Scheme::PreNorm:        return build_pre_norm(cfg, owner, device);
    case Scheme::PostNorm:       return build_post_norm(cfg, owner, device);
    case Scheme::DeepNorm:       return build_deep_norm(cfg, owner, device);
    case Scheme::HybridNorm:     return build_hybrid_norm(cfg, owner, device);
    case Scheme::HybridNormStar: return build_hybrid_norm_star(cfg, owner, device);
    case Scheme::PeriNorm:       return build_peri_norm(cfg, owner, device);
    case Scheme::MixLn:          return build_mix_ln(cfg, owner, device);
    case Scheme::ResiDual:       return build_resi_dual(cfg, owner, device);
    case Scheme::Siamese:        return build_siamese(cfg, owner, device);
    case Scheme::SiameseHybrid:  return build_siamese_hybrid(cfg, owner, device);
  }
  throw std::invalid_argument("build_scheme: unhandled scheme " + std::string(enum_name(cfg.scheme)));
}

}  // namespace normlab
