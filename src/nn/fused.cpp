#include "normlab/nn/fused.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <atomic>
#include <cmath>

#include "build_config.h"
#include "lanes.h"
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

namespace normlab::fused {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int kernel_threads() {
  std::atomic<int> calls{0};
  at::parallel_for(0, 2, 1, [&](int64_t, int64_t) { calls.fetch_add(1); });
  return calls.load();
}

std::string vector_isa() {
#if NORMLAB_VECTOR_ISAS
  const std::string aten = at::get_cpu_capability();
  if (aten == "AVX512" || aten == "AVX2") return aten;
#endif
  return "portable";
}

bool cpu_fusable(const torch::Tensor& x) {
  return x.device().is_cpu() &&
         (x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kDouble);
}

namespace {

constexpr int64_t kGrain = 16;  // rows per task of at::parallel_for

// ---- RMSNorm -------------------------------------------------------------------------------

// Sums with 8 independent partial accumulators, so that the compiler vectorises the reduction
// without reassociating one serial sum (no -ffast-math).
template <class T, class F>
T lane_sum(int64_t n, F term) {
  T acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += term(i + l);
  T total = 0;
  for (; i < n; ++i) total += term(i);
  for (int l = 0; l < 8; ++l) total += acc[l];
  return total;
}

// Autograd takes no undefined inputs, so the gain-free norm is its own function (below).
struct RmsNormFn : torch::autograd::Function<RmsNormFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in,
                               const torch::Tensor& w, double eps) {
    const torch::Tensor x = x_in.contiguous();
    const int64_t D = x.size(-1), rows = x.numel() / D;
    torch::Tensor y = torch::empty_like(x);
    torch::Tensor inv = torch::empty({rows}, x.options());
    const bool has_w = w.defined();
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "normlab_rms_norm", [&] {
      const scalar_t* xp = x.data_ptr<scalar_t>();
      const scalar_t* wp = has_w ? w.data_ptr<scalar_t>() : nullptr;
      scalar_t* yp = y.data_ptr<scalar_t>();
      scalar_t* ip = inv.data_ptr<scalar_t>();
      at::parallel_for(0, rows, kGrain, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const scalar_t* xr = xp + r * D;
          scalar_t* yr = yp + r * D;
          const scalar_t ss = lane_sum<scalar_t>(D, [&](int64_t i) { return xr[i] * xr[i]; });
          const scalar_t v =
              scalar_t(1) / std::sqrt(ss / static_cast<scalar_t>(D) + static_cast<scalar_t>(eps));
          ip[r] = v;
          if (has_w)
            for (int64_t i = 0; i < D; ++i) yr[i] = wp[i] * (xr[i] * v);
          else
            for (int64_t i = 0; i < D; ++i) yr[i] = xr[i] * v;
        }
      });
    });
    ctx->save_for_backward(has_w ? variable_list{x, inv, w} : variable_list{x, inv});
    return y;
  }

  // dx = v (g w) - v^3 x (sum_i g_i w_i x_i) / D;   dw = sum over rows of g x v
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& inv = saved[1];
    const torch::Tensor w = saved.size() > 2 ? saved[2] : torch::Tensor();
    const torch::Tensor g = grads[0].contiguous();
    const int64_t D = x.size(-1), rows = x.numel() / D;
    const bool has_w = w.defined();
    torch::Tensor gx = torch::empty_like(x);
    // The gain's gradient: one partial sum per chunk of rows (one chunk per thread), reduced
    // at the end; chunks are fixed by the row count, so the result does not depend on timing.
    const int64_t chunks =
        std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), rows / kGrain));
    const int64_t per_chunk = (rows + chunks - 1) / chunks;
    torch::Tensor gw_parts = torch::zeros({chunks, has_w ? D : 1}, x.options());
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "normlab_rms_norm_backward", [&] {
      const scalar_t* xp = x.data_ptr<scalar_t>();
      const scalar_t* gp = g.data_ptr<scalar_t>();
      const scalar_t* ip = inv.data_ptr<scalar_t>();
      const scalar_t* wp = has_w ? w.data_ptr<scalar_t>() : nullptr;
      scalar_t* gxp = gx.data_ptr<scalar_t>();
      scalar_t* partsp = gw_parts.data_ptr<scalar_t>();
      at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
          scalar_t* gw_acc = partsp + c * (has_w ? D : 1);
          for (int64_t r = c * per_chunk; r < std::min(rows, (c + 1) * per_chunk); ++r) {
            const scalar_t* xr = xp + r * D;
            const scalar_t* gr = gp + r * D;
            scalar_t* gxr = gxp + r * D;
            const scalar_t v = ip[r];
            const scalar_t dot =
                has_w ? lane_sum<scalar_t>(D, [&](int64_t i) { return gr[i] * wp[i] * xr[i]; })
                      : lane_sum<scalar_t>(D, [&](int64_t i) { return gr[i] * xr[i]; });
            const scalar_t b = v * v * v * dot / static_cast<scalar_t>(D);
            if (has_w) {
              for (int64_t i = 0; i < D; ++i) gxr[i] = v * gr[i] * wp[i] - b * xr[i];
              for (int64_t i = 0; i < D; ++i) gw_acc[i] += gr[i] * xr[i] * v;
            } else {
              for (int64_t i = 0; i < D; ++i) gxr[i] = v * gr[i] - b * xr[i];
            }
          }
        }
      });
    });
    if (!has_w) return {gx, torch::Tensor()};
    return {gx, gw_parts.sum(0), torch::Tensor()};
  }
};

struct RmsNormNoGainFn : torch::autograd::Function<RmsNormNoGainFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, double eps) {
    return RmsNormFn::forward(ctx, x, torch::Tensor(), eps);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return RmsNormFn::backward(ctx, grads);
  }
};

// ---- RoPE ------------------------------------------------------------------------------------

template <bool Backward, class T>
void rope_rows(const T* in, const T* cos, const T* sin, T* out, int64_t B, int64_t S, int64_t H,
               int64_t D) {
  const int64_t h = D / 2;
  at::parallel_for(0, B * S, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t bt = r0; bt < r1; ++bt) {
      const int64_t t = bt % S;
      const T* c = cos + t * D;
      const T* s = sin + t * D;
      for (int64_t head = 0; head < H; ++head) {
        const T* x = in + (bt * H + head) * D;
        T* y = out + (bt * H + head) * D;
        if (!Backward) {  // y_i = x_i c_i -+ x_{i+-h} s_i
          for (int64_t i = 0; i < h; ++i) y[i] = x[i] * c[i] - x[i + h] * s[i];
          for (int64_t i = h; i < D; ++i) y[i] = x[i] * c[i] + x[i - h] * s[i];
        } else {  // gx_i = g_i c_i +- g_{i+-h} s_{i+-h}
          for (int64_t i = 0; i < h; ++i) y[i] = x[i] * c[i] + x[i + h] * s[i + h];
          for (int64_t i = h; i < D; ++i) y[i] = x[i] * c[i] - x[i - h] * s[i - h];
        }
      }
    }
  });
}

struct RopeFn : torch::autograd::Function<RopeFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in,
                               const torch::Tensor& cos_in, const torch::Tensor& sin_in) {
    const torch::Tensor x = x_in.contiguous(), cos = cos_in.contiguous(), sin = sin_in.contiguous();
    torch::Tensor y = torch::empty_like(x);
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "normlab_rope", [&] {
      rope_rows<false>(x.data_ptr<scalar_t>(), cos.data_ptr<scalar_t>(), sin.data_ptr<scalar_t>(),
                       y.data_ptr<scalar_t>(), x.size(0), x.size(1), x.size(2), x.size(3));
    });
    ctx->save_for_backward({cos, sin});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor g = grads[0].contiguous();
    torch::Tensor gx = torch::empty_like(g);
    AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "normlab_rope_backward", [&] {
      rope_rows<true>(g.data_ptr<scalar_t>(), saved[0].data_ptr<scalar_t>(),
                      saved[1].data_ptr<scalar_t>(), gx.data_ptr<scalar_t>(), g.size(0), g.size(1),
                      g.size(2), g.size(3));
    });
    return {gx, torch::Tensor(), torch::Tensor()};
  }
};

// ---- Linear through oneDNN ---------------------------------------------------------------------

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

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const bool ok = cpu_fusable(x) && (!weight.defined() ||
                                     (weight.scalar_type() == x.scalar_type() && weight.is_cpu()));
  if (ok)
    return weight.defined() ? RmsNormFn::apply(x, weight, eps) : RmsNormNoGainFn::apply(x, eps);
  const std::optional<torch::Tensor> w =
      weight.defined() ? std::optional<torch::Tensor>(weight) : std::nullopt;
  return at::rms_norm(x, {x.size(-1)}, w, eps);
}

torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  if (cpu_fusable(x) && x.dim() == 4 && cos.scalar_type() == x.scalar_type())
    return RopeFn::apply(x, cos, sin);
  // Unfused: tables (T, D) broadcast over (B, T, H, D) as (T, 1, D).
  const int64_t half = x.size(-1) / 2;
  const torch::Tensor c = cos.unsqueeze(1), s = sin.unsqueeze(1);
  return x * c + torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1) * s;
}

}  // namespace normlab::fused
