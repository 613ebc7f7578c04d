// The contract between the model and a scheme. A scheme contributes:
//   - L blocks (SchemeBlockImpl): forward(Streams) -> Streams, reading like the paper's rule;
//   - enter: how the streams start from the token embedding;
//   - exit:  the end-of-network fusion that produces Z, the input of the LM head.
// build_scheme() is the one factory; each scheme's builder lives in src/nn/schemes/<name>.cpp and
// registers its end-of-network norms on the owning model under stable top-level names.
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <vector>

#include "normlab/nn/model_config.h"
#include "normlab/nn/streams.h"

namespace normlab {

/// The learned per-channel gains that weigh the X and the Y stream where a two-stream block
/// fuses them into the input of a shared branch ("attn" or "mlp"); read by the diagnostics.
struct BranchInputGains {
  const char* branch;
  torch::Tensor x, y;  // (C); undefined = a gain of 1
};

class SchemeBlockImpl : public torch::nn::Module {
 public:
  virtual Streams forward(const Streams& s) = 0;
  /// Two-stream blocks with shared branches list their input gains; others have none.
  virtual std::vector<BranchInputGains> input_gains() const { return {}; }
};

struct SchemeParts {
  std::vector<std::shared_ptr<SchemeBlockImpl>> blocks;  // n_layers of them
  std::function<Streams(const torch::Tensor& embedding)> enter;
  std::function<torch::Tensor(const Streams& s)> exit;  // -> Z (B, T, C)
};

/// Builds cfg.scheme's blocks and ends; end norms are registered on `owner`. Parameters are
/// created on `device` and initialised (init.h) with the scheme's own adjustments.
SchemeParts build_scheme(const ModelConfig& cfg, torch::nn::Module& owner, torch::Device device);

}  // namespace normlab
