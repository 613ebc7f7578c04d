#include "normlab/nn/aux_loss.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

namespace normlab {
namespace {

struct AuxGradientFunction : torch::autograd::Function<AuxGradientFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& y,
                               at::TensorList aux, at::TensorList grads) {
    ctx->saved_data["grads"] = grads.vec();
    ctx->saved_data["n"] = static_cast<int64_t>(aux.size());
    return y;  // returned unchanged: autograd makes it a view with this function's history
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_y) {
    torch::autograd::variable_list out{grad_y[0]};
    for (const torch::Tensor& g : ctx->saved_data["grads"].toTensorVector()) out.push_back(g);
    const int64_t n = ctx->saved_data["n"].toInt();
    for (int64_t i = 0; i < n; ++i) out.emplace_back();  // the grads themselves: none
    return out;
  }
};

}  // namespace

torch::Tensor with_aux_gradients(const torch::Tensor& y, const std::vector<torch::Tensor>& aux,
                                 const std::vector<torch::Tensor>& grads) {
  TORCH_CHECK(aux.size() == grads.size(), "with_aux_gradients: ", aux.size(), " aux losses and ",
              grads.size(), " gradients");
  bool any = false;
  for (const torch::Tensor& a : aux) any = any || a.requires_grad();
  if (!torch::GradMode::is_enabled() || !any) return y;
  return AuxGradientFunction::apply(y, at::TensorList(aux), at::TensorList(grads));
}

torch::Tensor aux_loss_gradient(const torch::Tensor& a, double loss_scale, double weight,
                                int64_t n) {
  torch::NoGradGuard no_grad;
  return torch::ones({}, a.options()).mul(loss_scale).mul(weight).div(static_cast<double>(n));
}

}  // namespace normlab
