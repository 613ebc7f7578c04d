// AdamW with decoupled weight decay, over named parameters in two groups: matrices decay,
// vectors (norm gains, SiameseNorm's c1, biases) never do, and the embedding and LM head decay
// only with optimizer.decay_embeddings. Two paths compute the same update:
//   fused:     at::_fused_adamw_ over each group (CUDA and CPU kernels of LibTorch)
//   reference: the per-tensor loop of PyTorch's AdamW, in plain tensor ops
// Its state (moments and step counts) round-trips through a TensorDict for checkpoints.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "normlab/config/config.h"
#include "normlab/util/safetensors.h"

namespace normlab {

/// A tensor to optimize, its name in the state, and its group (FSDP passes shard pieces,
/// whose group is decided on the whole parameter).
struct OptParam {
  OptParam(std::string n, torch::Tensor p, bool d)
      : name(std::move(n)), param(std::move(p)), decay(d) {}
  std::string name;
  torch::Tensor param;
  bool decay;
};

/// The names of `model`'s parameters in the weight-decay group (decays(), config.h), for the
/// FSDP layer, which groups shard pieces by their whole parameter (distributed/fsdp.h).
std::set<std::string> weight_decay_names(const torch::nn::Module& model,
                                         const OptimizerConfig& cfg);

class AdamW {
 public:
  /// Groups by decays().
  AdamW(const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
        const OptimizerConfig& cfg);
  AdamW(const std::vector<OptParam>& params, const OptimizerConfig& cfg);

  /// One update at learning rate `lr` from the parameters' .grad (parameters without a
  /// gradient are left alone).
  void step(double lr);
  int64_t steps_taken() const { return steps_; }

  /// "exp_avg.<name>", "exp_avg_sq.<name>" and "step" (int64 scalar).
  TensorDict state() const;
  /// Restores state(); throws std::invalid_argument on missing or mis-shaped entries.
  void load_state(const TensorDict& state);

  struct Group {
    double weight_decay;
    std::vector<std::string> names;
    std::vector<torch::Tensor> params, exp_avg, exp_avg_sq,
        steps;  // steps: fp32 scalars (fused API)
  };
  const std::vector<Group>& groups() const { return groups_; }
  /// Bytes of the moments and step counts.
  int64_t state_bytes() const;

 private:
  void step_reference(Group& g, double lr);
  OptimizerConfig cfg_;
  std::vector<Group> groups_;
  int64_t steps_ = 0;
};

/// Throws CheckpointError when an AdamW state as read (AdamW::state's names) holds a moment or a
/// step count that is NaN or infinite, or a second moment (exp_avg_sq.*) or a step count below
/// zero, naming `what` (the file), the tensor and its first bad element. A moment that is not
/// finite would stop its weight (an infinite second moment) or turn the loss to NaN steps later
/// without naming the cause. checkpoint_load calls it for every optimizer file it reads.
void check_optimizer_state(const TensorDict& state, const std::string& what);

/// The global L2 norm of the gradients (before clipping); when max_norm > 0, scales the
/// gradients by max_norm / (norm + 1e-6) if that is below 1 (as torch.nn.utils.clip_grad_norm_).
double clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm);

}  // namespace normlab
