// Mixture-of-Experts MLP branch (OLMoE / Switch Transformer style), the MLP of a block when
// model.moe selects it (model_config.h, MoeOptions). Tokens are rows x (N, C), N = B*T:
//   logits = x W_r^T (N, E), W_r bias-free;  p = softmax(logits) over all E experts
//   token choice: each token's top_k experts S(x) and their weights w_e = p_e (renormalize:
//   w_e = p_e / sum_{S(x)} p); output y = sum_{e in S(x)} w_e * expert_e(x), expert_e a SwiGLU
//   (mlp.h) of width d_expert. Dropless: no capacity, every assignment is computed.
// Auxiliary losses (Switch / OLMoE), of every forward:
//   load balance  lb = E * sum_e f_e * P_e,  f_e = share of the N*top_k assignments routed to e
//                 (no gradient), P_e = mean over tokens of p_e; 1 when perfectly balanced
//   router z-loss z  = mean over tokens of logsumexp(logits)^2
// Their gradients ride on the layer's output (aux_loss.h): the backward of y gives lb the
// gradient of loss_scale * lb_loss_weight * lb / layers and z that of the z-loss term, as if
// the model's loss held them, `layers` being the MoE layers the loss averages over and
// loss_scale the factor the caller backpropagates the loss with (DecoderLM sets it). Their
// values, the assignments per expert and the router's entropy go to the router log
// (router_log.h), for the loss's value and for logging.
// Dispatch: the N*top_k assignments are sorted by expert, each expert runs once on its
// contiguous slice of rows, and the outputs are scattered back with their weights; autograd runs
// through the same gather, matmuls and index_add. The experts run either as a loop of one GEMM
// pair per expert (dispatch_sorted) or as two grouped GEMMs over all of them (dispatch_grouped);
// model.moe.dispatch chooses (auto: grouped on CUDA where it fits); the loop runs each expert
// through its views of the stacked parameters, the grouped GEMMs take them whole. Parameter
// names: router.weight (E, C), experts.up (E, 2 d_expert, C), experts.down (E, C, d_expert)
// (experts.h).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <functional>
#include <memory>
#include <vector>

#include "normlab/nn/experts.h"
#include "normlab/nn/linear.h"
#include "normlab/nn/model_config.h"
#include "normlab/nn/router_log.h"

namespace normlab {

/// The top_k routing of rows x: weights (N, k) and experts (N, k) int64, plus p (N, E) and the
/// logits in the router's computation dtype (float32, float64 in float64 models).
struct Routing {
  torch::Tensor weights, experts, probs, logits;
};

/// Runs expert e on rows (M, C) -> (M, C); M may be 0.
using ExpertFn = std::function<torch::Tensor(int64_t e, const torch::Tensor& rows)>;

/// y (N, C) = sum_j weights[:, j] * expert_{experts[:, j]}(x): the N*k assignments sorted by
/// expert, one call per expert on its contiguous slice (every expert is called, with 0 rows
/// when it got none, so each has a gradient), scattered back with index_add.
torch::Tensor dispatch_sorted(const torch::Tensor& x, const torch::Tensor& experts,
                              const torch::Tensor& weights, int64_t n_experts,
                              const ExpertFn& expert);

/// The same sum with every expert's SwiGLU (up (E, 2h, C), down (E, C, h), stacked) as two
/// grouped GEMMs (at::_grouped_mm) over the sorted rows: one call per matrix for all experts,
/// the slices given by offsets computed on the rows' device (no copy to the host). x, up and
/// down in one dtype, which grouped_gemm_fits.
torch::Tensor dispatch_grouped(const torch::Tensor& x, const torch::Tensor& experts,
                               const torch::Tensor& weights, const torch::Tensor& up,
                               const torch::Tensor& down);

/// Whether at::_grouped_mm takes rows of C and h elements in `dtype`: float32, bfloat16 or
/// float16, with C and h elements both multiples of 16 bytes (its stride rule).
bool grouped_gemm_fits(torch::ScalarType dtype, int64_t C, int64_t h);

/// The same sum computed densely: every expert on every row, weighted by a (N, E) matrix that
/// is zero outside each row's top_k. Slow (E times the work); the tests' reference.
torch::Tensor dispatch_dense(const torch::Tensor& x, const torch::Tensor& experts,
                             const torch::Tensor& weights, int64_t n_experts,
                             const ExpertFn& expert);

class MoeImpl : public torch::nn::Module {
 public:
  MoeImpl(const ModelConfig& cfg, torch::Device device = torch::kCPU);
  torch::Tensor forward(const torch::Tensor& x);  // (..., C) -> (..., C); records its routing
  Routing route(const torch::Tensor& rows);       // rows (N, C)
  void pretty_print(std::ostream& stream) const override;

  int64_t n_experts, top_k;
  bool renormalize;
  MoeDispatch dispatch;
  Linear router{nullptr};    // (E, C)
  Experts experts{nullptr};  // up (E, 2 d_expert, C), down (E, C, d_expert)
  // The aux losses' gradients: model.moe's weights, the MoE layers the loss averages over (the
  // model's, from the config), and the factor the loss is backpropagated with.
  double lb_loss_weight, z_loss_weight;
  int64_t averaged_over;
  double loss_scale = 1.0;
  // Where the routing goes: this layer's own log, or the model's, shared by its MoE layers, in
  // which this is MoE layer `index`.
  std::shared_ptr<RouterLog> log = std::make_shared<RouterLog>();
  int64_t index = 0;

 private:
  // model.moe.dispatch for these rows: whether the grouped GEMMs run (throws ConfigError where
  // grouped is asked for and does not fit the dtype or widths).
  bool use_grouped(const torch::Tensor& rows) const;
};
TORCH_MODULE(Moe);

/// The MoE layers inside `m` (a block or a whole model), in registration order.
std::vector<MoeImpl*> moe_layers(torch::nn::Module& m);

}  // namespace normlab
