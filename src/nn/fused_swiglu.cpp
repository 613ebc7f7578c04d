// fused::swiglu (fused.h): the SwiGLU MLP's product, one pass each way over rows of
// u = [v | g] (2F wide):
//   out = v silu(g) = v g s,  s = sigmoid(g) = 1 / (1 + e^-g)
//   dv = go g s,  dg = go v s (1 + g (1 - s))
// float64 (the tests' precision) runs the formulas as written, with std::exp; float32 runs them
// on lanes (lanes.h), in one function per instruction set picked by vector_isa().
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "lanes.h"
#include "normlab/nn/fused.h"

namespace normlab::fused {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

constexpr int64_t kGrain = 16;  // rows per task of at::parallel_for

template <class T>
void swiglu_rows(const T* u, T* out, int64_t r0, int64_t r1, int64_t F) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* v = u + r * 2 * F;
    const T* g = v + F;
    T* o = out + r * F;
    for (int64_t i = 0; i < F; ++i) o[i] = v[i] * g[i] / (T(1) + std::exp(-g[i]));
  }
}

// Row r of the backward: u = [v | g] and its gradient [gv | gg] are 2F wide, go is F wide.
template <class T>
struct BackwardRow {
  const T* v;
  const T* g;
  const T* o;
  T* gv;
  T* gg;
  BackwardRow(const T* u, const T* go, T* gu, int64_t r, int64_t F)
      : v(u + r * 2 * F), g(v + F), o(go + r * F), gv(gu + r * 2 * F), gg(gv + F) {}
};

template <class T>
void swiglu_backward_rows(const T* u, const T* go, T* gu, int64_t r0, int64_t r1, int64_t F) {
  for (int64_t r = r0; r < r1; ++r) {
    const BackwardRow<T> w(u, go, gu, r, F);
    for (int64_t i = 0; i < F; ++i) {
      const T s = T(1) / (T(1) + std::exp(-w.g[i]));
      w.gv[i] = w.o[i] * w.g[i] * s;
      w.gg[i] = w.o[i] * w.v[i] * s * (T(1) + w.g[i] * (T(1) - s));
    }
  }
}

#if NORMLAB_LANES
using lanes::Lanes;

// One step of L::n elements each way. The rows' loops take the last, partial step through
// zero-padded copies, so every element takes the same lane code.
template <class L>
NORMLAB_ALWAYS_INLINE void swiglu_step(const float* v, const float* g, float* o) {
  const typename L::F gl = lanes::load<L>(g);
  lanes::store<L>(o, lanes::load<L>(v) * gl / (1.0f + lanes::exp<L>(-gl)));
}

template <class L>
NORMLAB_ALWAYS_INLINE void swiglu_backward_step(const float* v, const float* g, const float* o,
                                                float* gv, float* gg) {
  using V = typename L::F;
  const V vl = lanes::load<L>(v), gl = lanes::load<L>(g), ol = lanes::load<L>(o);
  const V sl = 1.0f / (1.0f + lanes::exp<L>(-gl));
  lanes::store<L>(gv, ol * gl * sl);
  lanes::store<L>(gg, ol * vl * sl * (1.0f + gl * (1.0f - sl)));
}

template <class L>
NORMLAB_ALWAYS_INLINE void swiglu_lanes(const float* u, float* out, int64_t r0, int64_t r1,
                                        int64_t F) {
  constexpr int64_t n = L::n;
  const int64_t full = F / n * n, rest = F - full;
  for (int64_t r = r0; r < r1; ++r) {
    const float* v = u + r * 2 * F;
    const float* g = v + F;
    float* o = out + r * F;
    for (int64_t i = 0; i < full; i += n) swiglu_step<L>(v + i, g + i, o + i);
    if (rest > 0) {
      float bv[n] = {}, bg[n] = {}, bo[n];
      std::memcpy(bv, v + full, rest * sizeof(float));
      std::memcpy(bg, g + full, rest * sizeof(float));
      swiglu_step<L>(bv, bg, bo);
      std::memcpy(o + full, bo, rest * sizeof(float));
    }
  }
}

template <class L>
NORMLAB_ALWAYS_INLINE void swiglu_backward_lanes(const float* u, const float* go, float* gu,
                                                 int64_t r0, int64_t r1, int64_t F) {
  constexpr int64_t n = L::n;
  const int64_t full = F / n * n, rest = F - full;
  for (int64_t r = r0; r < r1; ++r) {
    const BackwardRow<float> w(u, go, gu, r, F);
    for (int64_t i = 0; i < full; i += n)
      swiglu_backward_step<L>(w.v + i, w.g + i, w.o + i, w.gv + i, w.gg + i);
    if (rest > 0) {
      float bv[n] = {}, bg[n] = {}, bo[n] = {}, bgv[n], bgg[n];
      std::memcpy(bv, w.v + full, rest * sizeof(float));
      std::memcpy(bg, w.g + full, rest * sizeof(float));
      std::memcpy(bo, w.o + full, rest * sizeof(float));
      swiglu_backward_step<L>(bv, bg, bo, bgv, bgg);
      std::memcpy(w.gv + full, bgv, rest * sizeof(float));
      std::memcpy(w.gg + full, bgg, rest * sizeof(float));
    }
  }
}
#endif

// The float32 loops: the portable lanes for the baseline, and one pair per instruction set.
struct SwigluKernels {
  void (*forward)(const float*, float*, int64_t, int64_t, int64_t);
  void (*backward)(const float*, const float*, float*, int64_t, int64_t, int64_t);
};

#if NORMLAB_LANES
#define NORMLAB_SWIGLU_KERNELS(NAME, ATTR, BYTES)                                            \
  ATTR void swiglu_##NAME##_forward(const float* u, float* out, int64_t r0, int64_t r1,      \
                                    int64_t F) {                                             \
    swiglu_lanes<Lanes<BYTES>>(u, out, r0, r1, F);                                           \
  }                                                                                          \
  ATTR void swiglu_##NAME##_backward(const float* u, const float* go, float* gu, int64_t r0, \
                                     int64_t r1, int64_t F) {                                \
    swiglu_backward_lanes<Lanes<BYTES>>(u, go, gu, r0, r1, F);                               \
  }
NORMLAB_SWIGLU_KERNELS(portable, , 16)
NORMLAB_VECTOR_ISA_FUNCTIONS(NORMLAB_SWIGLU_KERNELS)
#undef NORMLAB_SWIGLU_KERNELS
#else
void swiglu_portable_forward(const float* u, float* out, int64_t r0, int64_t r1, int64_t F) {
  swiglu_rows<float>(u, out, r0, r1, F);
}
void swiglu_portable_backward(const float* u, const float* go, float* gu, int64_t r0, int64_t r1,
                              int64_t F) {
  swiglu_backward_rows<float>(u, go, gu, r0, r1, F);
}
#endif

const SwigluKernels& swiglu_kernels() {
  static const SwigluKernels chosen = [] {
#if NORMLAB_VECTOR_ISAS
    const std::string isa = vector_isa();
    if (isa == "AVX512") return SwigluKernels{swiglu_avx512_forward, swiglu_avx512_backward};
    if (isa == "AVX2") return SwigluKernels{swiglu_avx2_forward, swiglu_avx2_backward};
#endif
    return SwigluKernels{swiglu_portable_forward, swiglu_portable_backward};
  }();
  return chosen;
}

// float32 takes the kernels per instruction set, float64 the formulas as written (templates, so
// that the branch not taken is not compiled for the other type).
template <class T>
void swiglu_forward_any(const T* u, T* out, int64_t r0, int64_t r1, int64_t F) {
  if constexpr (std::is_same_v<T, float>)
    swiglu_kernels().forward(u, out, r0, r1, F);
  else
    swiglu_rows<T>(u, out, r0, r1, F);
}

template <class T>
void swiglu_backward_any(const T* u, const T* go, T* gu, int64_t r0, int64_t r1, int64_t F) {
  if constexpr (std::is_same_v<T, float>)
    swiglu_kernels().backward(u, go, gu, r0, r1, F);
  else
    swiglu_backward_rows<T>(u, go, gu, r0, r1, F);
}

struct SwigluFn : torch::autograd::Function<SwigluFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& u_in) {
    const torch::Tensor u = u_in.contiguous();
    const int64_t F = u.size(-1) / 2, rows = u.numel() / std::max<int64_t>(1, 2 * F);
    std::vector<int64_t> shape = u.sizes().vec();
    shape.back() = F;
    torch::Tensor out = torch::empty(shape, u.options());
    AT_DISPATCH_FLOATING_TYPES(u.scalar_type(), "normlab_swiglu", [&] {
      const scalar_t* up = u.data_ptr<scalar_t>();
      scalar_t* op = out.data_ptr<scalar_t>();
      at::parallel_for(0, rows, kGrain, [&](int64_t r0, int64_t r1) {
        swiglu_forward_any<scalar_t>(up, op, r0, r1, F);
      });
    });
    ctx->save_for_backward({u});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const torch::Tensor u = ctx->get_saved_variables()[0];
    const torch::Tensor go = grads[0].contiguous();
    const int64_t F = u.size(-1) / 2, rows = u.numel() / std::max<int64_t>(1, 2 * F);
    torch::Tensor gu = torch::empty_like(u);
    AT_DISPATCH_FLOATING_TYPES(u.scalar_type(), "normlab_swiglu_backward", [&] {
      const scalar_t* up = u.data_ptr<scalar_t>();
      const scalar_t* gp = go.data_ptr<scalar_t>();
      scalar_t* gup = gu.data_ptr<scalar_t>();
      at::parallel_for(0, rows, kGrain, [&](int64_t r0, int64_t r1) {
        swiglu_backward_any<scalar_t>(up, gp, gup, r0, r1, F);
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

}  // namespace normlab::fused
