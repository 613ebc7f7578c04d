#include "normlab/nn/loss.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

#include "normlab/kernels/ops.h"

namespace normlab {
namespace {

struct LinearCrossEntropy : torch::autograd::Function<LinearCrossEntropy> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const torch::Tensor& h, const torch::Tensor& weight,
                                                const torch::Tensor& targets, double z_loss,
                                                int64_t chunk_rows, bool with_grads) {
    const int64_t N = h.size(0);
    const auto acc =
        h.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;  // softmax dtype
    const double inv_n = 1.0 / static_cast<double>(N);
    torch::Tensor grad_h, grad_w;
    if (with_grads) {
      grad_h = torch::empty_like(h);
      grad_w = torch::zeros(weight.sizes(), weight.options().dtype(acc));
    }
    torch::Tensor ce_sum = torch::zeros({}, h.options().dtype(torch::kDouble));
    torch::Tensor z_sum = torch::zeros({}, h.options().dtype(torch::kDouble));
    for (int64_t r = 0; r < N; r += chunk_rows) {
      const int64_t n = std::min(chunk_rows, N - r);
      const torch::Tensor hc = h.narrow(0, r, n), tc = targets.narrow(0, r, n);
      const torch::Tensor logits = kernels::linear(hc, weight).to(acc);  // (n, V)
      const torch::Tensor lse = torch::logsumexp(logits, 1);             // (n)
      const torch::Tensor picked = logits.gather(1, tc.unsqueeze(1)).squeeze(1);
      ce_sum += (lse - picked).sum().to(torch::kDouble);
      if (z_loss > 0.0) z_sum += lse.pow(2).sum().to(torch::kDouble);
      if (!with_grads) continue;
      // d(mean ce)/dlogits = (softmax - onehot) / N; d(z_loss * mean lse^2)/dlogits = 2 z_loss lse
      // softmax / N.
      torch::Tensor d = (logits - lse.unsqueeze(1)).exp_();  // softmax
      if (z_loss > 0.0) d.mul_((2.0 * z_loss * lse).add_(1.0).unsqueeze(1));
      d.scatter_add_(1, tc.unsqueeze(1), torch::full({n, 1}, -1.0, d.options()));
      d.mul_(inv_n);
      const torch::Tensor dc = d.to(h.scalar_type());
      grad_h.narrow(0, r, n).copy_(torch::mm(dc, weight.to(h.scalar_type())));
      grad_w.add_(torch::mm(dc.t(), hc).to(acc));
    }
    const torch::Tensor ce = (ce_sum * inv_n).to(acc);
    const torch::Tensor z = (z_sum * inv_n).to(acc);
    const torch::Tensor loss = z_loss > 0.0 ? ce + z_loss * z : ce.clone();
    if (with_grads) ctx->save_for_backward({grad_h, grad_w.to(weight.scalar_type())});
    ctx->mark_non_differentiable({ce, z});
    return {loss, ce, z};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    TORCH_CHECK(!saved.empty(),
                "linear_cross_entropy: backward of a loss computed without gradients");
    const torch::Tensor g = grads[0];
    return {saved[0] * g.to(saved[0].scalar_type()),
            saved[1] * g.to(saved[1].scalar_type()),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

ChunkedLoss linear_cross_entropy(const torch::Tensor& h, const torch::Tensor& weight,
                                 const torch::Tensor& targets, double z_loss, int64_t chunk_rows) {
  TORCH_CHECK(h.dim() == 2 && weight.dim() == 2 && h.size(1) == weight.size(1) &&
                  targets.dim() == 1 && targets.size(0) == h.size(0),
              "linear_cross_entropy: h (N, C), weight (V, C), targets (N); got ", h.sizes(), ", ",
              weight.sizes(), ", ", targets.sizes());
  TORCH_CHECK(chunk_rows > 0, "linear_cross_entropy: chunk_rows must be positive");
  const bool with_grads =
      torch::GradMode::is_enabled() && (h.requires_grad() || weight.requires_grad());
  const auto out = LinearCrossEntropy::apply(h, weight, targets, z_loss, chunk_rows, with_grads);
  ChunkedLoss r{out[0], out[1], torch::Tensor()};
  if (z_loss > 0.0) r.z = out[2];
  return r;
}

}  // namespace normlab
