// The E SwiGLU experts of a Mixture-of-Experts layer (moe.h) as two stacked parameters, the
// layout of torchtitan and OLMo-core:
//   up    (E, 2 d_expert, C)  expert e's input projection in the dense MLP's layout (mlp.h):
//                             rows [0, d_expert) the value v, [d_expert, 2 d_expert) the gate g
//   down  (E, C, d_expert)    expert e's output projection
//   expert_e(x) = down[e] (silu(g) * v),  [v | g] = up[e] x
// so expert e is the dense Mlp with up.weight = up[e] and down.weight = down[e]. In a model the
// names are blocks.<l>.mlp.experts.up and blocks.<l>.mlp.experts.down.
//
// Checkpoints and weight files written before the experts were stacked name them
// blocks.<l>.mlp.experts.<e>.up.weight and ...down.weight; stack_legacy_experts turns such a
// dictionary (model weights, or optimizer moments under a prefix such as exp_avg.) into this
// layout.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include "normlab/util/safetensors.h"

namespace normlab {

class ExpertsImpl : public torch::nn::Module {
 public:
  ExpertsImpl(int64_t n_experts, int64_t d_model, int64_t d_expert,
              torch::Device device = torch::kCPU);
  /// Expert e on rows (M, C) -> (M, C), M may be 0; through the views up[e] and down[e].
  torch::Tensor forward(int64_t e, const torch::Tensor& rows);
  int64_t n_experts() const { return up.size(0); }
  int64_t width() const { return down.size(2); }  // d_expert
  void pretty_print(std::ostream& stream) const override;

  torch::Tensor up;    // (E, 2 d_expert, C)
  torch::Tensor down;  // (E, C, d_expert)
};
TORCH_MODULE(Experts);

/// One SwiGLU expert on rows (M, C): down (silu(g) * v), [v | g] = up rows^T; up (2 h, C),
/// down (C, h), through ATen's GEMM (BLAS on the CPU, cuBLAS on CUDA), not kernels::linear's
/// oneDNN path: an expert's row count changes from step to step and oneDNN builds a kernel per
/// shape (measured: the MoE step about 3x slower that way, docs/performance-cpu.md).
torch::Tensor swiglu_expert(const torch::Tensor& rows, const torch::Tensor& up,
                            const torch::Tensor& down);

/// Whether `weights` names experts in the per-expert layout (<p>.experts.<e>.up.weight).
bool has_legacy_experts(const TensorDict& weights);

/// `weights` with every family <p>.experts.<e>.{up,down}.weight, e = 0..E-1, replaced by
/// <p>.experts.up / <p>.experts.down, the E tensors stacked in expert order (<p> may carry any
/// prefix: exp_avg.blocks.0.mlp for an optimizer moment). A family of scalars (an optimizer's
/// per-parameter step counts) becomes its one value, which all of them must share. Other names
/// pass through. Throws CheckpointError when a family misses an expert, its tensors differ in
/// shape, or the stacked name is there already.
TensorDict stack_legacy_experts(TensorDict weights);

}  // namespace normlab
