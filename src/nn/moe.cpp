#include "normlab/nn/moe.h"

#include <torch/torch.h>

namespace normlab {
namespace {

// One expert's SwiGLU on its rows through ATen's GEMM (BLAS on CPU, cuBLAS on CUDA), not the
// oneDNN path of fused::linear: a slice's row count changes from step to step, and oneDNN builds
// a kernel per shape (measured: the MoE step about 3x slower that way, docs/performance-cpu.md).
torch::Tensor run_expert(MlpImpl& m, const torch::Tensor& rows) {
  const std::vector<torch::Tensor> vg = torch::linear(rows, m.up->weight).chunk(2, -1);
  return torch::linear(torch::silu(vg[1]) * vg[0], m.down->weight);
}

}  // namespace

torch::Tensor dispatch_sorted(const torch::Tensor& x, const torch::Tensor& experts,
                              const torch::Tensor& weights, int64_t n_experts,
                              const ExpertFn& expert) {
  const int64_t k = experts.size(1);
  const torch::Tensor flat = experts.reshape({-1});  // (N k): assignment a = token * k + j
  // Stable, so that within an expert the rows keep token order (deterministic sums).
  const torch::Tensor order =
      std::get<1>(flat.sort(/*stable=*/std::optional<bool>(true), /*dim=*/0, /*descending=*/false));
  const torch::Tensor token = order.div(k, "floor");
  const torch::Tensor counts = torch::bincount(flat, {}, n_experts).to(torch::kCPU);
  const torch::Tensor rows = x.index_select(0, token);  // (N k, C), grouped by expert
  const auto* c = counts.data_ptr<int64_t>();
  // On CUDA this loop is where a grouped GEMM over the slices (torch::_grouped_mm with the
  // offsets cumsum(counts)) would replace the E calls; the counts' copy to the host above is
  // what sizes the slices (one synchronisation per layer).
  std::vector<torch::Tensor> outs;
  outs.reserve(static_cast<size_t>(n_experts));
  int64_t offset = 0;
  for (int64_t e = 0; e < n_experts; ++e) {
    outs.push_back(expert(e, rows.narrow(0, offset, c[e])));
    offset += c[e];
  }
  const torch::Tensor ys = torch::cat(outs, 0);
  const torch::Tensor w = weights.reshape({-1}).index_select(0, order).to(ys.scalar_type());
  return torch::zeros({x.size(0), ys.size(1)}, ys.options())
      .index_add(0, token, ys * w.unsqueeze(1));
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
    : n_experts(cfg.moe.n_experts), top_k(cfg.moe.top_k), renormalize(cfg.moe.renormalize) {
  router = register_module("router", Linear(cfg.d_model, n_experts, device));
  expert_list = register_module("experts", torch::nn::ModuleList());
  for (int64_t e = 0; e < n_experts; ++e) {
    experts.push_back(Mlp(cfg.d_model, cfg.expert_width(), device));
    expert_list->push_back(experts.back());
  }
}

Routing MoeImpl::route(const torch::Tensor& rows) {
  Routing r;
  const torch::Tensor logits = router(rows);
  // Softmax, top-k and the aux losses in float32 (float64 stays float64) under autocast too.
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

  last.counts = torch::bincount(r.experts.reshape({-1}), {}, n_experts);
  const torch::Tensor f = last.counts.to(r.probs.scalar_type()) / static_cast<double>(N * top_k);
  last.lb = static_cast<double>(n_experts) * (f * r.probs.mean(0)).sum();
  last.z = torch::logsumexp(r.logits, -1).pow(2).mean();
  {
    torch::NoGradGuard no_grad;
    last.entropy = -(r.probs * r.probs.clamp_min(1e-30).log()).sum(-1).mean();
  }

  const torch::Tensor y = dispatch_sorted(
      rows, r.experts, r.weights, n_experts,
      [this](int64_t e, const torch::Tensor& in) { return run_expert(*experts[e], in); });
  return y.view(x.sizes());
}

void MoeImpl::pretty_print(std::ostream& stream) const {
  stream << "normlab::Moe(" << n_experts << " experts of " << experts[0]->down->weight.size(1)
         << ", top-" << top_k << (renormalize ? ", renormalized" : "") << ", dropless)";
}

std::vector<MoeImpl*> moe_layers(torch::nn::Module& m) {
  std::vector<MoeImpl*> out;
  for (const auto& sub : m.modules(/*include_self=*/true))
    if (auto* moe = dynamic_cast<MoeImpl*>(sub.get())) out.push_back(moe);
  return out;
}

}  // namespace normlab
