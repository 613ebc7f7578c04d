#include "normlab/nn/moe.h"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <sstream>

#include "normlab/nn/autocast.h"
#include "normlab/nn/aux_loss.h"
#include "normlab/util/error.h"

namespace normlab {
namespace {

// The N*k assignments (a = token * k + j) sorted by expert: the sorted expert ids, the order
// (assignment ids) and each one's token. Stable, so that within an expert the rows keep token
// order (deterministic sums).
struct Sorted {
  torch::Tensor expert, order, token;
};
Sorted sort_assignments(const torch::Tensor& experts) {
  Sorted s;
  std::tie(s.expert, s.order) = experts.reshape({-1}).sort(
      /*stable=*/std::optional<bool>(true), /*dim=*/0, /*descending=*/false);
  s.token = s.order.div(experts.size(1), "floor");
  return s;
}

// y (N, C): the outputs ys (N k, C) of the sorted assignments, weighted and summed per token.
torch::Tensor scatter_back(int64_t N, const Sorted& s, const torch::Tensor& weights,
                           const torch::Tensor& ys) {
  const torch::Tensor w = weights.reshape({-1}).index_select(0, s.order).to(ys.scalar_type());
  return torch::zeros({N, ys.size(1)}, ys.options()).index_add(0, s.token, ys * w.unsqueeze(1));
}

// The row alignment of each expert's slice in dispatch_grouped (16 rows: 16 bytes and more in
// every dtype the grouped GEMM takes).
constexpr int64_t kGroupRows = 16;

// The dtype the experts' GEMMs run in: autocast's where it is on for the rows' device and the
// rows are float32 (as autocast casts), else the rows' own.
torch::ScalarType compute_dtype(const torch::Tensor& rows) {
  const c10::DeviceType dev = rows.device().type();
  if (rows.scalar_type() == torch::kFloat && at::autocast::is_autocast_enabled(dev))
    return at::autocast::get_autocast_dtype(dev);
  return rows.scalar_type();
}

}  // namespace

torch::Tensor dispatch_sorted(const torch::Tensor& x, const torch::Tensor& experts,
                              const torch::Tensor& weights, int64_t n_experts,
                              const ExpertFn& expert) {
  const Sorted s = sort_assignments(experts);
  const torch::Tensor counts = torch::bincount(s.expert, {}, n_experts).to(torch::kCPU);
  const torch::Tensor rows = x.index_select(0, s.token);  // (N k, C), grouped by expert
  const auto* c = counts.data_ptr<int64_t>();
  // The counts' copy to the host above sizes the slices (one synchronisation per layer).
  std::vector<torch::Tensor> outs;
  outs.reserve(static_cast<size_t>(n_experts));
  int64_t offset = 0;
  for (int64_t e = 0; e < n_experts; ++e) {
    outs.push_back(expert(e, rows.narrow(0, offset, c[e])));
    offset += c[e];
  }
  return scatter_back(x.size(0), s, weights, torch::cat(outs, 0));
}

torch::Tensor dispatch_grouped(const torch::Tensor& x, const torch::Tensor& experts,
                               const torch::Tensor& weights, const torch::Tensor& up,
                               const torch::Tensor& down) {
  const Sorted s = sort_assignments(experts);
  const int64_t E = up.size(0), M = s.expert.size(0);
  const torch::TensorOptions ids = s.expert.options();
  // Each expert's slice is padded with zero rows to a multiple of kGroupRows (at least one):
  // the grouped GEMM's CUDA kernels want aligned groups, their backward reducing over them.
  // Everything is computed on the device (no copy to the host): the padded length L is the
  // static bound round_up(M) + E * kGroupRows, the last expert's group reaching to L, so that
  // every row of the GEMMs belongs to a group (zero rows give zero outputs and gradients).
  const int64_t L = (M + kGroupRows - 1) / kGroupRows * kGroupRows + E * kGroupRows;
  const torch::Tensor ends = torch::searchsorted(s.expert, torch::arange(E, ids),
                                                 /*out_int32=*/false, /*right=*/true);
  const torch::Tensor counts = ends - torch::cat({ends.new_zeros({1}), ends.slice(0, 0, E - 1)});
  const torch::Tensor padded =
      ((counts + (kGroupRows - 1)).div(kGroupRows, "floor") * kGroupRows).clamp_min(kGroupRows);
  const torch::Tensor padded_ends = padded.cumsum(0);
  // Assignment i (sorted) goes to row i + (padded start - start) of its expert.
  const torch::Tensor dest =
      torch::arange(M, ids) + ((padded_ends - padded) - (ends - counts)).index_select(0, s.expert);
  const torch::Tensor offs = padded_ends.to(torch::kInt);
  offs.narrow(0, E - 1, 1).fill_(L);
  const torch::Tensor rows =
      torch::zeros({L, x.size(1)}, x.options()).index_copy(0, dest, x.index_select(0, s.token));
  const std::vector<torch::Tensor> vg =
      at::_grouped_mm(rows, up.transpose(1, 2), offs).chunk(2, -1);
  const torch::Tensor ys = at::_grouped_mm(torch::silu(vg[1]) * vg[0], down.transpose(1, 2), offs);
  return scatter_back(x.size(0), s, weights, ys.index_select(0, dest));
}

bool grouped_gemm_fits(torch::ScalarType dtype, int64_t C, int64_t h) {
  if (dtype != torch::kFloat && dtype != torch::kBFloat16 && dtype != torch::kHalf) return false;
  const int64_t per_16_bytes = 16 / static_cast<int64_t>(c10::elementSize(dtype));
  return C % per_16_bytes == 0 && h % per_16_bytes == 0;
}

torch::Tensor dispatch_dense(const torch::Tensor& x, const torch::Tensor& experts,
                             const torch::Tensor& weights, int64_t n_experts,
                             const ExpertFn& expert) {
  const torch::Tensor gate =
      torch::zeros({x.size(0), n_experts}, weights.options()).scatter(1, experts, weights);
  torch::Tensor y;
  for (int64_t e = 0; e < n_experts; ++e) {
    const torch::Tensor ye = expert(e, x);
    const torch::Tensor term = ye * gate.select(1, e).unsqueeze(1).to(ye.scalar_type());
    y = y.defined() ? y + term : term;
  }
  return y;
}

MoeImpl::MoeImpl(const ModelConfig& cfg, torch::Device device)
    : n_experts(cfg.moe.n_experts),
      top_k(cfg.moe.top_k),
      renormalize(cfg.moe.renormalize),
      dispatch(cfg.moe.dispatch),
      lb_loss_weight(cfg.moe.lb_loss_weight),
      z_loss_weight(cfg.moe.z_loss_weight),
      averaged_over(0) {
  for (int64_t l = 0; l < cfg.n_layers; ++l) averaged_over += cfg.is_moe_layer(l) ? 1 : 0;
  router = register_module("router", Linear(cfg.d_model, n_experts, device));
  experts = register_module("experts", Experts(n_experts, cfg.d_model, cfg.expert_width(), device));
}

Routing MoeImpl::route(const torch::Tensor& rows) {
  Routing r;
  // The router in float32 (float64 stays float64) under autocast too: its logits, softmax,
  // top-k and the aux losses. A bf16 router would round near-ties between experts.
  torch::Tensor logits;
  {
    const NoAutocast fp32;
    logits = router(rows.scalar_type() == torch::kDouble ? rows : rows.to(torch::kFloat));
  }
  r.logits = logits.scalar_type() == torch::kDouble ? logits : logits.to(torch::kFloat);
  r.probs = torch::softmax(r.logits, -1);
  std::tie(r.weights, r.experts) = r.probs.topk(top_k, -1);
  if (renormalize) r.weights = r.weights / r.weights.sum(-1, /*keepdim=*/true);
  return r;
}

torch::Tensor MoeImpl::forward(const torch::Tensor& x) {
  const int64_t C = x.size(-1);
  const torch::Tensor rows = x.reshape({-1, C});
  const Routing r = route(rows);
  const int64_t N = rows.size(0);

  const torch::Tensor counts = torch::bincount(r.experts.reshape({-1}), {}, n_experts);
  const torch::Tensor f = counts.to(r.probs.scalar_type()) / static_cast<double>(N * top_k);
  const torch::Tensor lb = static_cast<double>(n_experts) * (f * r.probs.mean(0)).sum();
  const torch::Tensor z = torch::logsumexp(r.logits, -1).pow(2).mean();
  {
    torch::NoGradGuard no_grad;
    const torch::Tensor entropy = -(r.probs * r.probs.clamp_min(1e-30).log()).sum(-1).mean();
    log->record(index, {lb.detach(), z.detach(), counts, entropy});
  }

  torch::Tensor y;
  if (use_grouped(rows)) {
    const torch::ScalarType dtype = compute_dtype(rows);
    y = dispatch_grouped(rows.to(dtype), r.experts, r.weights, experts->up.to(dtype),
                         experts->down.to(dtype));
  } else {
    // One view per expert, taken once: their gradients come back as one (E, ...) tensor.
    const std::vector<torch::Tensor> up = experts->up.unbind(0), down = experts->down.unbind(0);
    y = dispatch_sorted(
        rows, r.experts, r.weights, n_experts, [&](int64_t e, const torch::Tensor& in) {
          return swiglu_expert(in, up[static_cast<size_t>(e)], down[static_cast<size_t>(e)]);
        });
  }
  if (torch::GradMode::is_enabled() && lb.requires_grad())  // the aux losses' gradients
    y = with_aux_gradients(y, {lb, z},
                           {aux_loss_gradient(lb, loss_scale, lb_loss_weight, averaged_over),
                            aux_loss_gradient(z, loss_scale, z_loss_weight, averaged_over)});
  return y.view(x.sizes());
}

bool MoeImpl::use_grouped(const torch::Tensor& rows) const {
  if (dispatch == MoeDispatch::Loop) return false;
  const torch::ScalarType dtype = compute_dtype(rows);
  const int64_t C = rows.size(1), h = experts->width();
  const bool fits = grouped_gemm_fits(dtype, C, h);
  if (dispatch == MoeDispatch::Auto) return fits && rows.is_cuda();
  if (!fits) {
    std::ostringstream msg;
    msg << "model.moe.dispatch = grouped: the grouped GEMM takes float32, bfloat16 or float16 "
           "with d_model and d_expert multiples of 16 bytes; here "
        << c10::toString(dtype) << ", d_model " << C << ", d_expert " << h
        << " (use loop, or auto to fall back to it)";
    throw ConfigError(msg.str());
  }
  return true;
}

void MoeImpl::pretty_print(std::ostream& stream) const {
  stream << "normlab::Moe(" << n_experts << " experts of " << experts->width() << ", top-" << top_k
         << (renormalize ? ", renormalized" : "") << ", dropless)";
}

std::vector<MoeImpl*> moe_layers(torch::nn::Module& m) {
  std::vector<MoeImpl*> out;
  for (const auto& sub : m.modules(/*include_self=*/true))
    if (auto* moe = dynamic_cast<MoeImpl*>(sub.get())) out.push_back(moe);
  return out;
}

}  // namespace normlab
