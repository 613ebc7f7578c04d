// kernels::add_rms_norm (ops.h): the autograd function over normlab's CUDA kernels
// (launchers.h), and the op's entry points, which send CPU tensors to the CPU kernel
// (cpu/add_rms_norm.h). Everything the kernels do not take is composed by Norm::add_forward.
#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

#include "build_config.h"
#include "kernels/cpu/add_rms_norm.h"
#include "normlab/kernels/ops.h"

#if NORMLAB_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "kernels/cuda/launchers.h"
#endif

namespace normlab::kernels {

bool fusable_add_rms_norm(const torch::Tensor& x, const torch::Tensor& b,
                          const torch::Tensor& weight) {
  if (x.is_cpu()) return cpu::add_rms_norm_fits(x, b, weight);
#if NORMLAB_WITH_CUDA
  if (!x.is_cuda() || !weight.defined() || b.device() != x.device() ||
      weight.device() != x.device())
    return false;
  if (weight.scalar_type() != torch::kFloat || weight.dim() != 1 || !weight.is_contiguous())
    return false;
  if (x.dim() < 1 || x.sizes() != b.sizes() || x.numel() == 0 || weight.size(0) != x.size(-1))
    return false;
  if (!x.is_contiguous() || !b.is_contiguous() || x.size(-1) > (int64_t{1} << 30)) return false;
  const auto s = x.scalar_type(), bt = b.scalar_type();
  return (s == torch::kFloat && (bt == torch::kFloat || bt == torch::kBFloat16)) ||
         (s == torch::kBFloat16 && bt == torch::kBFloat16);
#else
  (void)x, (void)b, (void)weight;
  return false;
#endif
}

namespace {

#if NORMLAB_WITH_CUDA
cuda::Dtype kernel_dtype(torch::ScalarType t) {
  return t == torch::kBFloat16 ? cuda::Dtype::BF16 : cuda::Dtype::F32;
}

struct AddRmsNormFn : torch::autograd::Function<AddRmsNormFn> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const torch::Tensor& x, const torch::Tensor& b,
                                                const torch::Tensor& weight, double divisor,
                                                double eps) {
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t cols = x.size(-1), rows = x.numel() / cols;
    torch::Tensor r = torch::empty_like(x), n = torch::empty_like(x);
    torch::Tensor rstd = torch::empty({rows}, x.options().dtype(torch::kFloat));
    cuda::add_rms_norm_forward(x.data_ptr(), kernel_dtype(x.scalar_type()), b.data_ptr(),
                               kernel_dtype(b.scalar_type()), weight.data_ptr<float>(),
                               r.data_ptr(), n.data_ptr(), rstd.data_ptr<float>(), rows,
                               static_cast<int>(cols), static_cast<float>(1.0 / divisor),
                               static_cast<float>(eps), c10::cuda::getCurrentCUDAStream().stream());
    ctx->save_for_backward({r, rstd, weight});
    ctx->saved_data["divisor"] = divisor;
    ctx->saved_data["b_dtype"] = static_cast<int64_t>(b.scalar_type());
    return {r, n};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &r = saved[0], &rstd = saved[1], &weight = saved[2];
    const double divisor = ctx->saved_data["divisor"].toDouble();
    const auto b_dtype = static_cast<torch::ScalarType>(ctx->saved_data["b_dtype"].toInt());
    const torch::Tensor dr_in =
        grads[0].defined() ? grads[0].to(r.scalar_type()).contiguous() : torch::Tensor();
    if (!grads[1].defined()) {  // only r was used downstream: the add's gradients
      if (!dr_in.defined())
        return {torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
                torch::Tensor()};
      return {dr_in, (dr_in / divisor).to(b_dtype), torch::Tensor(), torch::Tensor(),
              torch::Tensor()};
    }
    const c10::cuda::CUDAGuard guard(r.device());
    const torch::Tensor dn = grads[1].to(r.scalar_type()).contiguous();
    const int64_t cols = r.size(-1), rows = r.numel() / cols;
    torch::Tensor gx = torch::empty_like(r),
                  gb = torch::empty(r.sizes(), r.options().dtype(b_dtype));
    torch::Tensor partial =
        torch::zeros({cuda::add_rms_norm_backward_blocks(rows), cols}, rstd.options());
    cuda::add_rms_norm_backward(r.data_ptr(), rstd.data_ptr<float>(), weight.data_ptr<float>(),
                                dn.data_ptr(), dr_in.defined() ? dr_in.data_ptr() : nullptr,
                                kernel_dtype(r.scalar_type()), gx.data_ptr(), gb.data_ptr(),
                                kernel_dtype(b_dtype), partial.data_ptr<float>(), rows,
                                static_cast<int>(cols), static_cast<float>(1.0 / divisor),
                                c10::cuda::getCurrentCUDAStream().stream());
    return {gx, gb, partial.sum(0), torch::Tensor(), torch::Tensor()};
  }
};
#endif

}  // namespace

std::pair<torch::Tensor, torch::Tensor> add_rms_norm(const torch::Tensor& x, const torch::Tensor& b,
                                                     double divisor, const torch::Tensor& weight,
                                                     double eps) {
  TORCH_CHECK(divisor != 0.0, "add_rms_norm: divisor must be non-zero");
  TORCH_CHECK(fusable_add_rms_norm(x, b, weight),
              "add_rms_norm: these tensors do not take normlab's kernels ",
              "(fusable_add_rms_norm); Norm::add_forward composes the op for them");
  if (x.is_cpu()) return cpu::add_rms_norm(x, b, divisor, weight, eps);
#if NORMLAB_WITH_CUDA
  const auto out = AddRmsNormFn::apply(x, b, weight, divisor, eps);
  return {out[0], out[1]};
#else
  (void)eps;
  return {};
#endif
}

}  // namespace normlab::kernels
