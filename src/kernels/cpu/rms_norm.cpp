// kernels::rms_norm (ops.h): RMSNorm over the last dimension, one pass per row each way:
//   v = 1 / sqrt(mean(x^2) + eps),  y = w x v
//   dx = v (g w) - v^3 x (sum_i g_i w_i x_i) / D,   dw = sum over rows of g x v
// The rows' bodies run on the lanes of isa.h (float32 per instruction set, float64 one number a
// lane; bfloat16 rows computed in float32, their 1/rms and the gain's partial sums kept in
// float32).
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "isa.h"
#include "normlab/kernels/ops.h"

namespace normlab::kernels {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

using cpu::steps;

constexpr int64_t kGrain = 16;  // rows per task of at::parallel_for

// y = w x v for rows [r0, r1) of D numbers; v = 1 / sqrt(mean(x^2) + eps) into inv. w may be null.
struct RmsNormRows {
  template <class L, class E>
  static NORMLAB_ALWAYS_INLINE void run(const E* xp, const E* wp, E* yp, typename L::Scalar* inv,
                                        int64_t r0, int64_t r1, int64_t D, double eps) {
    using S = typename L::Scalar;
    for (int64_t r = r0; r < r1; ++r) {
      const E* x = xp + r * D;
      E* y = yp + r * D;
      typename L::F acc = cpu::splat<L>(0);
      steps<L>(D, [&](int64_t i, auto s) NORMLAB_INLINE_LAMBDA {
        const auto xl = s.load(x + i);
        acc += xl * xl;
      });
      const S v = S(1) / std::sqrt(cpu::hsum<L>(acc) / static_cast<S>(D) + static_cast<S>(eps));
      inv[r] = v;
      steps<L>(D, [&](int64_t i, auto s) NORMLAB_INLINE_LAMBDA {
        const auto xv = s.load(x + i) * v;
        s.store(y + i, wp ? s.load(wp + i) * xv : xv);
      });
    }
  }
};

// The backward of rows [r0, r1): gx, and g x v added into gw_acc (D numbers) where w is given.
struct RmsNormBackwardRows {
  template <class L, class E>
  static NORMLAB_ALWAYS_INLINE void run(const E* xp, const E* gp, const typename L::Scalar* ip,
                                        const E* wp, E* gxp, typename L::Scalar* gw_acc, int64_t r0,
                                        int64_t r1, int64_t D) {
    using S = typename L::Scalar;
    for (int64_t r = r0; r < r1; ++r) {
      const E* x = xp + r * D;
      const E* g = gp + r * D;
      E* gx = gxp + r * D;
      const S v = ip[r];
      typename L::F acc = cpu::splat<L>(0);
      steps<L>(D, [&](int64_t i, auto s) NORMLAB_INLINE_LAMBDA {
        const auto gw = wp ? s.load(g + i) * s.load(wp + i) : s.load(g + i);
        acc += gw * s.load(x + i);
      });
      const S b = v * v * v * cpu::hsum<L>(acc) / static_cast<S>(D);
      steps<L>(D, [&](int64_t i, auto s) NORMLAB_INLINE_LAMBDA {
        const auto gl = s.load(g + i), xl = s.load(x + i);
        s.store(gx + i, (wp ? gl * s.load(wp + i) : gl) * v - xl * b);
        if (wp) s.store(gw_acc + i, s.load(gw_acc + i) + gl * xl * v);
      });
    }
  }
};

// Autograd takes no undefined inputs, so the gain-free norm is its own function (below).
struct RmsNormFn : torch::autograd::Function<RmsNormFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in,
                               const torch::Tensor& w, double eps) {
    const torch::Tensor x = x_in.contiguous();
    const int64_t D = x.size(-1), rows = x.numel() / D;
    torch::Tensor y = torch::empty_like(x);
    const bool has_w = w.defined();
    torch::Tensor inv;
    AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "normlab_rms_norm", [&] {
      using acc_t = cpu::compute_t<scalar_t>;
      inv = torch::empty({rows}, x.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
      const scalar_t* xp = x.data_ptr<scalar_t>();
      const scalar_t* wp = has_w ? w.data_ptr<scalar_t>() : nullptr;
      scalar_t* yp = y.data_ptr<scalar_t>();
      acc_t* ip = inv.data_ptr<acc_t>();
      at::parallel_for(0, rows, kGrain, [&](int64_t r0, int64_t r1) {
        cpu::run<RmsNormRows, scalar_t>(xp, wp, yp, ip, r0, r1, D, eps);
      });
    });
    ctx->save_for_backward(has_w ? variable_list{x, inv, w} : variable_list{x, inv});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& inv = saved[1];
    const torch::Tensor w = saved.size() > 2 ? saved[2] : torch::Tensor();
    const torch::Tensor g = grads[0].to(x.scalar_type()).contiguous();
    const int64_t D = x.size(-1), rows = x.numel() / D;
    const bool has_w = w.defined();
    torch::Tensor gx = torch::empty_like(x);
    // The gain's gradient: one partial sum per chunk of rows (one chunk per thread), reduced
    // at the end; chunks are fixed by the row count, so the result does not depend on timing.
    const int64_t chunks =
        std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), rows / kGrain));
    const int64_t per_chunk = (rows + chunks - 1) / chunks;
    // Summed in the numbers the rows compute in (float32 for bfloat16 rows).
    torch::Tensor gw_parts = torch::zeros({chunks, has_w ? D : 1}, inv.options());
    AT_DISPATCH_FLOATING_TYPES_AND(
        at::kBFloat16, x.scalar_type(), "normlab_rms_norm_backward", [&] {
          using acc_t = cpu::compute_t<scalar_t>;
          const scalar_t* xp = x.data_ptr<scalar_t>();
          const scalar_t* gp = g.data_ptr<scalar_t>();
          const acc_t* ip = inv.data_ptr<acc_t>();
          const scalar_t* wp = has_w ? w.data_ptr<scalar_t>() : nullptr;
          scalar_t* gxp = gx.data_ptr<scalar_t>();
          acc_t* partsp = gw_parts.data_ptr<acc_t>();
          at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
            for (int64_t c = c0; c < c1; ++c)
              cpu::run<RmsNormBackwardRows, scalar_t>(xp, gp, ip, wp, gxp,
                                                      partsp + c * (has_w ? D : 1), c * per_chunk,
                                                      std::min(rows, (c + 1) * per_chunk), D);
          });
        });
    if (!has_w) return {gx, torch::Tensor()};
    return {gx, gw_parts.sum(0).to(w.scalar_type()), torch::Tensor()};
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

}  // namespace

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const bool ok = cpu_fusable(x) && (!weight.defined() ||
                                     (weight.scalar_type() == x.scalar_type() && weight.is_cpu()));
  if (ok)
    return weight.defined() ? RmsNormFn::apply(x, weight, eps) : RmsNormNoGainFn::apply(x, eps);
  const std::optional<torch::Tensor> w =
      weight.defined() ? std::optional<torch::Tensor>(weight) : std::nullopt;
  return at::rms_norm(x, {x.size(-1)}, w, eps);
}

}  // namespace normlab::kernels
