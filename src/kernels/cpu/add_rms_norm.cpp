// kernels::add_rms_norm on the CPU (ops.h): a sub-layer's residual add and the RMSNorm after it,
// one pass over each row each way:
//   r = x + b / d,  v = 1 / sqrt(mean(r^2) + eps),  n = w r v
//   dr = dr_in + v (dn w) - r v^3 (sum_i dn_i w_i r_i) / D,   dx = dr,  db = dr / d,
//   dw = sum over rows of dn r v
// r is stored in x's dtype and n is computed from the stored r, as the composition
// (x + b / d, then the norm of that tensor) computes it, with the same operations in the same
// order as kernels::rms_norm: in float32 and float64 the op is bitwise the composition.
// bfloat16 rows are computed in float32 (b / d is not rounded to bfloat16 before the add).
// x and b may differ: float32 x with bfloat16 b is the residual stream under CPU autocast.
#include "add_rms_norm.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "isa.h"

namespace normlab::kernels::cpu {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

constexpr int64_t kGrain = 16;  // rows per task of at::parallel_for

// Rows [r0, r1) of D numbers: r and n, and v into inv.
struct AddRmsNormRows {
  template <class L, class X, class B>
  static NORMLAB_ALWAYS_INLINE void run(const X* xp, const B* bp, const typename L::Scalar* w,
                                        X* rp, X* np, typename L::Scalar* inv,
                                        typename L::Scalar div, int64_t r0, int64_t r1, int64_t D,
                                        double eps) {
    using S = typename L::Scalar;
    for (int64_t row = r0; row < r1; ++row) {
      const X* x = xp + row * D;
      const B* b = bp + row * D;
      X* r = rp + row * D;
      X* n = np + row * D;
      typename L::F acc = splat<L>(0);
      steps<L>(D, [&](int64_t i, auto s) NORMLAB_INLINE_LAMBDA {
        s.store(r + i, s.load(x + i) + s.load(b + i) / div);
        const auto rl = s.load(r + i);  // as stored: the norm reads the rounded r
        acc += rl * rl;
      });
      const S v = S(1) / std::sqrt(hsum<L>(acc) / static_cast<S>(D) + static_cast<S>(eps));
      inv[row] = v;
      steps<L>(D, [&](int64_t i, auto s) NORMLAB_INLINE_LAMBDA {
        s.store(n + i, s.load(w + i) * (s.load(r + i) * v));
      });
    }
  }
};

// The backward of rows [r0, r1): dx, db, and dn r v added into gw_acc (D numbers). dr_in may be
// null (r not used downstream).
struct AddRmsNormBackwardRows {
  template <class L, class X, class B>
  static NORMLAB_ALWAYS_INLINE void run(const X* rp, const X* dnp, const X* drp,
                                        const typename L::Scalar* ip, const typename L::Scalar* w,
                                        X* gxp, B* gbp, typename L::Scalar* gw_acc,
                                        typename L::Scalar div, int64_t r0, int64_t r1, int64_t D) {
    using S = typename L::Scalar;
    for (int64_t row = r0; row < r1; ++row) {
      const X* r = rp + row * D;
      const X* dn = dnp + row * D;
      const X* dr = drp ? drp + row * D : nullptr;
      X* gx = gxp + row * D;
      B* gb = gbp + row * D;
      const S v = ip[row];
      typename L::F acc = splat<L>(0);
      steps<L>(D, [&](int64_t i, auto s) NORMLAB_INLINE_LAMBDA {
        acc += s.load(dn + i) * s.load(w + i) * s.load(r + i);
      });
      const S c = v * v * v * hsum<L>(acc) / static_cast<S>(D);
      steps<L>(D, [&](int64_t i, auto s) NORMLAB_INLINE_LAMBDA {
        const auto dnl = s.load(dn + i), rl = s.load(r + i);
        auto g = dnl * s.load(w + i) * v - rl * c;
        if (dr) g += s.load(dr + i);
        s.store(gx + i, g);
        s.store(gb + i, g / div);
        s.store(gw_acc + i, s.load(gw_acc + i) + dnl * rl * v);
      });
    }
  }
};

torch::ScalarType compute_dtype(torch::ScalarType t) {
  return t == torch::kDouble ? t : torch::kFloat;
}

// Calls fn with a null pointer of x's and of b's element types (the fitting pairs only).
template <class Fn>
void dispatch_pair(torch::ScalarType xt, torch::ScalarType bt, Fn&& fn) {
  if (xt == torch::kDouble) return fn(static_cast<double*>(nullptr), static_cast<double*>(nullptr));
  if (xt == torch::kBFloat16) return fn(static_cast<bf16*>(nullptr), static_cast<bf16*>(nullptr));
  if (bt == torch::kBFloat16) return fn(static_cast<float*>(nullptr), static_cast<bf16*>(nullptr));
  return fn(static_cast<float*>(nullptr), static_cast<float*>(nullptr));
}

struct AddRmsNormFn : torch::autograd::Function<AddRmsNormFn> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x_in,
                               const torch::Tensor& b_in, const torch::Tensor& w_in, double divisor,
                               double eps) {
    const torch::Tensor x = x_in.contiguous(), b = b_in.contiguous(), w = w_in.contiguous();
    const int64_t D = x.size(-1), rows = x.numel() / D;
    torch::Tensor r = torch::empty_like(x), n = torch::empty_like(x);
    torch::Tensor inv = torch::empty({rows}, x.options().dtype(compute_dtype(x.scalar_type())));
    dispatch_pair(x.scalar_type(), b.scalar_type(), [&](auto* xz, auto* bz) {
      using X = std::remove_pointer_t<decltype(xz)>;
      using B = std::remove_pointer_t<decltype(bz)>;
      using S = compute_t<X>;
      const X* xp = x.data_ptr<X>();
      const B* bp = b.data_ptr<B>();
      const S* wp = w.data_ptr<S>();
      X *rp = r.data_ptr<X>(), *np = n.data_ptr<X>();
      S* ip = inv.data_ptr<S>();
      const auto div = static_cast<S>(divisor);
      at::parallel_for(0, rows, kGrain, [&](int64_t r0, int64_t r1) {
        cpu::run<AddRmsNormRows, X>(xp, bp, wp, rp, np, ip, div, r0, r1, D, eps);
      });
    });
    ctx->save_for_backward({r, inv, w});
    ctx->saved_data["divisor"] = divisor;
    ctx->saved_data["b_dtype"] = b.scalar_type();
    return {r, n};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &r = saved[0], &inv = saved[1], &w = saved[2];
    const double divisor = ctx->saved_data["divisor"].toDouble();
    const auto b_dtype = ctx->saved_data["b_dtype"].toScalarType();
    const torch::Tensor dr =
        grads[0].defined() ? grads[0].to(r.scalar_type()).contiguous() : torch::Tensor();
    if (!grads[1].defined()) {  // only r was used downstream: the add's gradients
      if (!dr.defined()) return {torch::Tensor(), torch::Tensor(), torch::Tensor(), {}, {}};
      return {dr, (dr / divisor).to(b_dtype), torch::Tensor(), {}, {}};
    }
    const torch::Tensor dn = grads[1].to(r.scalar_type()).contiguous();
    const int64_t D = r.size(-1), rows = r.numel() / D;
    torch::Tensor gx = torch::empty_like(r),
                  gb = torch::empty(r.sizes(), r.options().dtype(b_dtype));
    // The gain's gradient: one partial sum per chunk of rows, fixed by the row count (so the
    // result does not depend on timing), reduced at the end.
    const int64_t chunks =
        std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), rows / kGrain));
    const int64_t per_chunk = (rows + chunks - 1) / chunks;
    torch::Tensor gw_parts = torch::zeros({chunks, D}, inv.options());
    dispatch_pair(r.scalar_type(), b_dtype, [&](auto* xz, auto* bz) {
      using X = std::remove_pointer_t<decltype(xz)>;
      using B = std::remove_pointer_t<decltype(bz)>;
      using S = compute_t<X>;
      const X *rp = r.data_ptr<X>(), *dnp = dn.data_ptr<X>();
      const X* drp = dr.defined() ? dr.data_ptr<X>() : nullptr;
      const S *ip = inv.data_ptr<S>(), *wp = w.data_ptr<S>();
      X* gxp = gx.data_ptr<X>();
      B* gbp = gb.data_ptr<B>();
      S* partsp = gw_parts.data_ptr<S>();
      const auto div = static_cast<S>(divisor);
      at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c)
          cpu::run<AddRmsNormBackwardRows, X>(rp, dnp, drp, ip, wp, gxp, gbp, partsp + c * D, div,
                                              c * per_chunk, std::min(rows, (c + 1) * per_chunk),
                                              D);
      });
    });
    return {gx, gb, gw_parts.sum(0), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool add_rms_norm_fits(const torch::Tensor& x, const torch::Tensor& b,
                       const torch::Tensor& weight) {
  if (!x.is_cpu() || !b.is_cpu() || !weight.defined() || !weight.is_cpu()) return false;
  if (x.dim() < 1 || x.sizes() != b.sizes() || x.numel() == 0) return false;
  if (weight.dim() != 1 || weight.size(0) != x.size(-1)) return false;
  const auto s = x.scalar_type(), bt = b.scalar_type();
  if (weight.scalar_type() != compute_dtype(s)) return false;
  return (s == torch::kFloat && (bt == torch::kFloat || bt == torch::kBFloat16)) ||
         (s == torch::kBFloat16 && bt == torch::kBFloat16) ||
         (s == torch::kDouble && bt == torch::kDouble);
}

std::pair<torch::Tensor, torch::Tensor> add_rms_norm(const torch::Tensor& x, const torch::Tensor& b,
                                                     double divisor, const torch::Tensor& weight,
                                                     double eps) {
  const auto out = AddRmsNormFn::apply(x, b, weight, divisor, eps);
  return {out[0], out[1]};
}

}  // namespace normlab::kernels::cpu
