// kernels::swiglu (ops.h): the SwiGLU MLP's product, one pass each way over rows of
// u = [v | g] (2F wide):
//   out = v silu(g) = v g s,  s = sigmoid(g) = 1 / (1 + e^-g)
//   dv = go g s,  dg = go v s (1 + g (1 - s))
// The rows' bodies run on the lanes of isa.h (float32 per instruction set, float64 one number a
// lane, with std::exp; bfloat16 rows are loaded into float32 lanes and rounded once on store).
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <vector>

#include "isa.h"
#include "normlab/kernels/ops.h"

namespace normlab::kernels {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

using cpu::steps;

constexpr int64_t kGrain = 16;  // rows per task of at::parallel_for

struct SwigluRows {
  template <class L, class E>
  static NORMLAB_ALWAYS_INLINE void run(const E* u, E* out, int64_t r0, int64_t r1, int64_t F) {
    using T = typename L::Scalar;
    for (int64_t r = r0; r < r1; ++r) {
      const E* v = u + r * 2 * F;
      const E* g = v + F;
      E* o = out + r * F;
      steps<L>(F, [&](int64_t i, auto s) NORMLAB_INLINE_LAMBDA {
        const auto vl = s.load(v + i), gl = s.load(g + i);
        s.store(o + i, vl * gl / (T(1) + cpu::exp<L>(-gl)));
      });
    }
  }
};

// Row r of the backward: u = [v | g] and its gradient [gv | gg] are 2F wide, go is F wide.
struct SwigluBackwardRows {
  template <class L, class E>
  static NORMLAB_ALWAYS_INLINE void run(const E* u, const E* go, E* gu, int64_t r0, int64_t r1,
                                        int64_t F) {
    using T = typename L::Scalar;
    for (int64_t r = r0; r < r1; ++r) {
      const E* v = u + r * 2 * F;
      const E* g = v + F;
      const E* o = go + r * F;
      E* gv = gu + r * 2 * F;
      E* gg = gv + F;
      steps<L>(F, [&](int64_t i, auto s) NORMLAB_INLINE_LAMBDA {
        const auto vl = s.load(v + i), gl = s.load(g + i), ol = s.load(o + i);
        const auto sl = T(1) / (T(1) + cpu::exp<L>(-gl));
        s.store(gv + i, ol * gl * sl);
        s.store(gg + i, ol * vl * sl * (T(1) + gl * (T(1) - sl)));
      });
    }
  }
};

struct SwigluFn : torch::autograd::Function<SwigluFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& u_in) {
    const torch::Tensor u = u_in.contiguous();
    const int64_t F = u.size(-1) / 2, rows = u.numel() / std::max<int64_t>(1, 2 * F);
    std::vector<int64_t> shape = u.sizes().vec();
    shape.back() = F;
    torch::Tensor out = torch::empty(shape, u.options());
    AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, u.scalar_type(), "normlab_swiglu", [&] {
      const scalar_t* up = u.data_ptr<scalar_t>();
      scalar_t* op = out.data_ptr<scalar_t>();
      at::parallel_for(0, rows, kGrain, [&](int64_t r0, int64_t r1) {
        cpu::run<SwigluRows, scalar_t>(up, op, r0, r1, F);
      });
    });
    ctx->save_for_backward({u});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const torch::Tensor u = ctx->get_saved_variables()[0];
    const torch::Tensor go = grads[0].to(u.scalar_type()).contiguous();
    const int64_t F = u.size(-1) / 2, rows = u.numel() / std::max<int64_t>(1, 2 * F);
    torch::Tensor gu = torch::empty_like(u);
    AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, u.scalar_type(), "normlab_swiglu_backward", [&] {
      const scalar_t* up = u.data_ptr<scalar_t>();
      const scalar_t* gp = go.data_ptr<scalar_t>();
      scalar_t* gup = gu.data_ptr<scalar_t>();
      at::parallel_for(0, rows, kGrain, [&](int64_t r0, int64_t r1) {
        cpu::run<SwigluBackwardRows, scalar_t>(up, gp, gup, r0, r1, F);
      });
    });
    return {gu};
  }
};

}  // namespace

torch::Tensor swiglu(const torch::Tensor& u) {
  TORCH_CHECK(u.dim() >= 1 && u.size(-1) % 2 == 0,
              "swiglu: the input's last dimension must be even ([v | g]): input ", u.sizes());
  if (cpu_fusable(u)) return SwigluFn::apply(u);
  const std::vector<torch::Tensor> vg = u.chunk(2, /*dim=*/-1);
  return torch::silu(vg[1]) * vg[0];
}

}  // namespace normlab::kernels
