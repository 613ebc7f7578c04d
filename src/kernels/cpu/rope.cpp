// kernels::rope (ops.h): rotary position embedding over x (B, T, H, D) with tables (T, D),
// h = D / 2:
//   forward   y_i = x_i c_i - x_{i+h} s_i  (i < h),   y_i = x_i c_i + x_{i-h} s_i  (i >= h)
//   backward  gx_i = g_i c_i + g_{i+h} s_{i+h}  (i < h),   gx_i = g_i c_i - g_{i-h} s_{i-h}
// Each half of a head's row is one run of steps on the lanes of isa.h. bfloat16 rows take float32
// tables (or bfloat16 ones) and are computed in float32, rounded once on store.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "isa.h"
#include "normlab/kernels/ops.h"

namespace normlab::kernels {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

using cpu::steps;

// Rows [r0, r1) of the B T rows (each H heads of D numbers), forward or backward.
template <bool Backward>
struct RopeRows {
  template <class L, class E, class C>
  static NORMLAB_ALWAYS_INLINE void run(const E* in, const C* cos, const C* sin, E* out, int64_t r0,
                                        int64_t r1, int64_t S, int64_t H, int64_t D) {
    const int64_t h = D / 2;
    for (int64_t bt = r0; bt < r1; ++bt) {
      const C* c = cos + bt % S * D;
      const C* s = sin + bt % S * D;
      for (int64_t head = 0; head < H; ++head) {
        const E* x = in + (bt * H + head) * D;
        E* y = out + (bt * H + head) * D;
        steps<L>(h, [&](int64_t i, auto p) NORMLAB_INLINE_LAMBDA {
          if constexpr (!Backward)
            p.store(y + i, p.load(x + i) * p.load(c + i) - p.load(x + i + h) * p.load(s + i));
          else
            p.store(y + i, p.load(x + i) * p.load(c + i) + p.load(x + i + h) * p.load(s + i + h));
        });
        steps<L>(D - h, [&](int64_t j, auto p) NORMLAB_INLINE_LAMBDA {
          const int64_t i = h + j;
          if constexpr (!Backward)
            p.store(y + i, p.load(x + i) * p.load(c + i) + p.load(x + j) * p.load(s + i));
          else
            p.store(y + i, p.load(x + i) * p.load(c + i) - p.load(x + j) * p.load(s + j));
        });
      }
    }
  }
};

template <bool Backward>
torch::Tensor rope_apply(const torch::Tensor& x, const torch::Tensor& cos,
                         const torch::Tensor& sin) {
  torch::Tensor y = torch::empty_like(x);
  const int64_t B = x.size(0), S = x.size(1), H = x.size(2), D = x.size(3);
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "normlab_rope", [&] {
    // bfloat16 rows take float32 tables (or their own type); the rest, tables of their type.
    using table_t = std::conditional_t<std::is_same_v<scalar_t, at::BFloat16>, float, scalar_t>;
    const scalar_t* xp = x.data_ptr<scalar_t>();
    scalar_t* yp = y.data_ptr<scalar_t>();
    const auto apply = [&](const auto* cp, const auto* sp) {
      at::parallel_for(0, B * S, 1, [&](int64_t r0, int64_t r1) {
        cpu::run<RopeRows<Backward>, scalar_t>(xp, cp, sp, yp, r0, r1, S, H, D);
      });
    };
    if (cos.scalar_type() == x.scalar_type())
      apply(cos.data_ptr<scalar_t>(), sin.data_ptr<scalar_t>());
    else
      apply(cos.data_ptr<table_t>(), sin.data_ptr<table_t>());
  });
  return y;
}

struct RopeFn : torch::autograd::Function<RopeFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in,
                               const torch::Tensor& cos_in, const torch::Tensor& sin_in) {
    const torch::Tensor cos = cos_in.contiguous(), sin = sin_in.contiguous();
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["dtype"] = x_in.scalar_type();
    return rope_apply<false>(x_in.contiguous(), cos, sin);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    return {rope_apply<true>(grads[0].to(ctx->saved_data["dtype"].toScalarType()).contiguous(),
                             saved[0], saved[1]),
            torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const bool tables = cos.scalar_type() == sin.scalar_type() && cos.is_cpu() && sin.is_cpu() &&
                      (cos.scalar_type() == x.scalar_type() ||
                       (x.scalar_type() == torch::kBFloat16 && cos.scalar_type() == torch::kFloat));
  if (cpu_fusable(x) && x.dim() == 4 && tables) return RopeFn::apply(x, cos, sin);
  // Unfused: tables (T, D) broadcast over (B, T, H, D) as (T, 1, D).
  const int64_t half = x.size(-1) / 2;
  const torch::Tensor c = cos.unsqueeze(1), s = sin.unsqueeze(1);
  return x * c + torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1) * s;
}

}  // namespace normlab::kernels
