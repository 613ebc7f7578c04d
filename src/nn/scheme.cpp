// build_scheme: the one factory from Scheme to its builder in src/nn/schemes/.
#include <torch/torch.h>

#include "nn/schemes/schemes.h"
#include "normlab/nn/block.h"

namespace normlab {

SchemeParts build_scheme(const ModelConfig& cfg, torch::nn::Module& owner, torch::Device device) {
  switch (cfg.scheme) {
#define NORMLAB_SCHEME(name, Enum, two_stream, qkv_norm, Base) \
  case Scheme::Enum:                                           \
    return schemes::build_##name(cfg, owner, device);
#include "normlab/nn/scheme_table.h"
#undef NORMLAB_SCHEME
  }
  throw std::invalid_argument("build_scheme: unhandled scheme " +
                              std::string(enum_name(cfg.scheme)));
}

}  // namespace normlab
