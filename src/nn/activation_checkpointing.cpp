#include "normlab/nn/activation_checkpointing.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

#include "normlab/nn/autocast.h"

namespace normlab {
namespace {

struct ActivationCheckpointFunction : torch::autograd::Function<ActivationCheckpointFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                at::TensorList ins, int64_t block) {
    ctx->saved_data["block"] = block;
    const AutocastState autocast = AutocastState::current();
    ctx->saved_data["autocast_cpu"] = autocast.cpu;
    ctx->saved_data["autocast_cuda"] = autocast.cuda;
    ctx->save_for_backward(ins.vec());
    auto* b = reinterpret_cast<SchemeBlockImpl*>(static_cast<intptr_t>(block));
    const Streams out = b->forward({ins[0], ins.size() > 1 ? ins[1] : torch::Tensor()});
    torch::autograd::variable_list outs{out.x};
    if (out.y.defined()) outs.push_back(out.y);
    return outs;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* b =
        reinterpret_cast<SchemeBlockImpl*>(static_cast<intptr_t>(ctx->saved_data["block"].toInt()));
    std::vector<torch::Tensor> ins;
    for (const auto& t : ctx->get_saved_variables()) ins.push_back(t.detach().requires_grad_(true));
    std::vector<torch::Tensor> outs, gs;
    {
      torch::AutoGradMode grad_on(true);
      AutocastGuard autocast_cpu(at::kCPU, ctx->saved_data["autocast_cpu"].toBool());
      AutocastGuard autocast_cuda(at::kCUDA, ctx->saved_data["autocast_cuda"].toBool());
      const Streams out = b->forward({ins[0], ins.size() > 1 ? ins[1] : torch::Tensor()});
      std::vector<torch::Tensor> o{out.x};
      if (out.y.defined()) o.push_back(out.y);
      for (size_t i = 0; i < grads.size() && i < o.size(); ++i)
        if (o[i].defined() && o[i].requires_grad() && grads[i].defined()) {
          outs.push_back(o[i]);
          gs.push_back(grads[i]);
        }
    }
    if (!outs.empty()) torch::autograd::backward(outs, gs);
    torch::autograd::variable_list result;
    for (const auto& t : ins) result.push_back(t.grad());
    result.emplace_back();  // block
    return result;
  }
};

}  // namespace

Streams activation_checkpointed_forward(SchemeBlockImpl& block, const Streams& in) {
  if (!torch::GradMode::is_enabled()) return block.forward(in);  // nothing to keep anyway
  std::vector<torch::Tensor> ins{in.x};
  if (in.y.defined()) ins.push_back(in.y);
  const auto outs = ActivationCheckpointFunction::apply(
      at::TensorList(ins), static_cast<int64_t>(reinterpret_cast<intptr_t>(&block)));
  return {outs[0], outs.size() > 1 ? outs[1] : torch::Tensor()};
}

}  // namespace normlab
