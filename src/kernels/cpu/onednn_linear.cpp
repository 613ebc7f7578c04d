// kernels::linear (ops.h): y = x w^T with its three GEMMs (forward, and dx = dy w, dw = dy^T x)
// through oneDNN's matmul, float32 on the CPU where LibTorch lets that matmul run here
// (onednn_linear_available); everything else takes ATen's linear. It fuses nothing: it routes
// the float32 GEMMs to the library that measured faster for them (docs/performance-cpu.md).
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "build_config.h"
#include "normlab/kernels/capabilities.h"
#include "normlab/kernels/ops.h"
#include "normlab/util/cpu_class.h"

#if NORMLAB_HAVE_ONEDNN_MATMUL
// Exported by libtorch_cpu without an installed header (ATen/native/mkldnn/Matmul.h in the
// PyTorch sources): result = beta * result + alpha * mat1 @ mat2 through oneDNN. The build
// checks that it links (cmake/checks/onednn_matmul.cpp).
namespace at::native {
void mkldnn_matmul(const at::Tensor& mat1, const at::Tensor& mat2, const at::Tensor& result,
                   float beta, float alpha);
}
#endif

namespace normlab::kernels {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

#if NORMLAB_HAVE_ONEDNN_MATMUL
torch::Tensor onednn_mm(const torch::Tensor& a, const torch::Tensor& b) {
  torch::Tensor out = torch::empty({a.size(0), b.size(1)}, a.options());
  at::native::mkldnn_matmul(a, b, out, /*beta=*/0.f, /*alpha=*/1.f);
  return out;
}

// y = x w^T; backward dx = dy w, dw = dy^T x: three GEMMs, all through oneDNN.
struct LinearFn : torch::autograd::Function<LinearFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& w) {
    const torch::Tensor x2 = x.reshape({-1, x.size(-1)}).contiguous();
    ctx->save_for_backward({x2, w});
    ctx->saved_data["shape"] = x.sizes().vec();
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = w.size(0);
    return onednn_mm(x2, w.t()).view(shape);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x2 = saved[0];
    const torch::Tensor& w = saved[1];
    const torch::Tensor g = grads[0].reshape({-1, w.size(0)}).contiguous();
    torch::Tensor gx, gw;
    if (ctx->needs_input_grad(0)) gx = onednn_mm(g, w).view(ctx->saved_data["shape"].toIntVector());
    if (ctx->needs_input_grad(1)) gw = onednn_mm(g.t(), x2);
    return {gx, gw};
  }
};
#endif

}  // namespace

bool onednn_linear_available() {
#if NORMLAB_HAVE_ONEDNN_MATMUL
  // LibTorch refuses its oneDNN matmul, for fp32 too, where oneDNN runs below its bf16 level
  // (AVX2-only CPUs, or ONEDNN_MAX_CPU_ISA below AVX512_CORE): ATen's linear runs there.
  return onednn_matmul_usable();
#else
  return false;
#endif
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight) {
#if NORMLAB_HAVE_ONEDNN_MATMUL
  // Empty inputs take ATen's path, whose weight gradient is zero; the oneDNN kernel leaves it
  // unwritten (Fused.LinearOfNoRowsHasAZeroWeightGradient). Under CPU autocast ATen's linear
  // runs too: autocast casts its operands to bf16 (the call below would bypass the dispatcher,
  // and with it autocast, and compute in fp32).
  // A weight that is not a matrix takes ATen's path too (ATen's linear takes a vector).
  if (x.is_cpu() && x.scalar_type() == torch::kFloat && weight.scalar_type() == torch::kFloat &&
      weight.is_cpu() && weight.dim() == 2 && x.numel() > 0 &&
      !at::autocast::is_autocast_enabled(at::kCPU) && onednn_linear_available()) {
    // ATen's linear checks the shapes before its GEMM; oneDNN would only say that it "could
    // not create a primitive descriptor".
    TORCH_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1),
                "linear: the input's last dimension must equal the weight's second: input ",
                x.sizes(), ", weight ", weight.sizes());
    return LinearFn::apply(x, weight);
  }
#endif
  return torch::linear(x, weight);
}

}  // namespace normlab::kernels
