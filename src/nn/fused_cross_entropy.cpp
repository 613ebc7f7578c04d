// fused::cross_entropy (fused.h): the mean cross-entropy over rows of logits x (N, V) with
// targets t (N), as torch::cross_entropy_loss computes it (rows whose target is -100 left out):
//   m_i = max_j x_ij,  l_i = log sum_j e^(x_ij - m_i)
//   ce = sum_i ((m_i - x_i,t_i) + l_i) / n,   n = the rows counted
//   dx_ij = g (e^((x_ij - m_i) - l_i) - [j = t_i]) / n     (0 on the rows left out)
// The forward reads each row twice (its maximum, then the sum of exponentials, while the row is
// in cache) and keeps m and l apart (their sum, logsumexp, would lose l's digits to m's ulp in a
// row far from zero); the backward writes the gradient in one pass. ATen's composition
// writes the log-softmax forward, then fills and scatters the gradient of the picked entries and
// reads both back in the log-softmax backward. float64 runs the formulas with std::exp; float32
// runs them on lanes (lanes.h), one function per instruction set picked by vector_isa().
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "lanes.h"
#include "normlab/nn/fused.h"

namespace normlab::fused {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

constexpr int64_t kIgnored = -100;  // torch::cross_entropy_loss's default ignore_index
constexpr int64_t kGrain = 8;       // rows per task of at::parallel_for

// A row's maximum m and l = log sum e^(x - m), into ml[0] and ml[1].
template <class T>
void lse_row(const T* x, int64_t V, T* ml) {
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < V; ++j) m = x[j] > m ? x[j] : m;
  T s = 0;
  for (int64_t j = 0; j < V; ++j) s += std::exp(x[j] - m);
  ml[0] = m;
  ml[1] = std::log(s);
}

// dx = scale e^((x - m) - l), without the target's -scale (the caller subtracts it).
template <class T>
void softmax_grad_row(const T* x, const T* ml, T scale, T* dx, int64_t V) {
  for (int64_t j = 0; j < V; ++j) dx[j] = scale * std::exp((x[j] - ml[0]) - ml[1]);
}

#if NORMLAB_LANES
using lanes::Lanes;

// The lanes' exp clamps its argument at -87, so an entry more than 87 below the row's maximum
// counts e^-87 (1.6e-38) instead of less: far below a float32 ulp of the sum, which is >= 1.
template <class L>
NORMLAB_ALWAYS_INLINE void lse_row_lanes(const float* x, int64_t V, float* ml_out) {
  using F = typename L::F;
  constexpr int64_t n = L::n;
  const int64_t full = V / n * n;
  float m = -std::numeric_limits<float>::infinity();
  if (full > 0) {
    F ml = lanes::load<L>(x);
    for (int64_t j = n; j < full; j += n) {
      const F xl = lanes::load<L>(x + j);
      ml = xl > ml ? xl : ml;
    }
    for (int64_t k = 0; k < n; ++k) m = ml[k] > m ? ml[k] : m;
  }
  for (int64_t j = full; j < V; ++j) m = x[j] > m ? x[j] : m;
  F sl = F{};
  const F ml = lanes::splat<L>(m);
  for (int64_t j = 0; j < full; j += n) sl += lanes::exp<L>(lanes::load<L>(x + j) - ml);
  float s = 0.0f;
  for (int64_t k = 0; k < n; ++k) s += sl[k];
  for (int64_t j = full; j < V; ++j) s += std::exp(x[j] - m);
  ml_out[0] = m;
  ml_out[1] = std::log(s);
}

template <class L>
NORMLAB_ALWAYS_INLINE void softmax_grad_row_lanes(const float* x, const float* ml, float scale,
                                                  float* dx, int64_t V) {
  constexpr int64_t n = L::n;
  const int64_t full = V / n * n;
  const typename L::F mm = lanes::splat<L>(ml[0]), ll = lanes::splat<L>(ml[1]),
                      sc = lanes::splat<L>(scale);
  for (int64_t j = 0; j < full; j += n)
    lanes::store<L>(dx + j, sc * lanes::exp<L>((lanes::load<L>(x + j) - mm) - ll));
  for (int64_t j = full; j < V; ++j) dx[j] = scale * std::exp((x[j] - ml[0]) - ml[1]);
}
#endif

struct CrossEntropyRows {
  void (*lse)(const float*, int64_t, float*);
  void (*grad)(const float*, const float*, float, float*, int64_t);
};

#if NORMLAB_LANES
#define NORMLAB_CE_ROWS(NAME, ATTR, BYTES)                                                   \
  ATTR void lse_row_##NAME(const float* x, int64_t V, float* ml) {                           \
    lse_row_lanes<Lanes<BYTES>>(x, V, ml);                                                   \
  }                                                                                          \
  ATTR void softmax_grad_row_##NAME(const float* x, const float* ml, float scale, float* dx, \
                                    int64_t V) {                                             \
    softmax_grad_row_lanes<Lanes<BYTES>>(x, ml, scale, dx, V);                               \
  }
NORMLAB_CE_ROWS(portable, , 16)
NORMLAB_VECTOR_ISA_FUNCTIONS(NORMLAB_CE_ROWS)
#undef NORMLAB_CE_ROWS
#else
void lse_row_portable(const float* x, int64_t V, float* ml) { lse_row<float>(x, V, ml); }
void softmax_grad_row_portable(const float* x, const float* ml, float scale, float* dx, int64_t V) {
  softmax_grad_row<float>(x, ml, scale, dx, V);
}
#endif

const CrossEntropyRows& ce_rows() {
  static const CrossEntropyRows chosen = [] {
#if NORMLAB_VECTOR_ISAS
    const std::string isa = vector_isa();
    if (isa == "AVX512") return CrossEntropyRows{lse_row_avx512, softmax_grad_row_avx512};
    if (isa == "AVX2") return CrossEntropyRows{lse_row_avx2, softmax_grad_row_avx2};
#endif
    return CrossEntropyRows{lse_row_portable, softmax_grad_row_portable};
  }();
  return chosen;
}

template <class T>
void lse_row_any(const T* x, int64_t V, T* ml) {
  if constexpr (std::is_same_v<T, float>)
    ce_rows().lse(x, V, ml);
  else
    lse_row<T>(x, V, ml);
}

template <class T>
void softmax_grad_row_any(const T* x, const T* ml, T scale, T* dx, int64_t V) {
  if constexpr (std::is_same_v<T, float>)
    ce_rows().grad(x, ml, scale, dx, V);
  else
    softmax_grad_row<T>(x, ml, scale, dx, V);
}

struct CrossEntropyFn : torch::autograd::Function<CrossEntropyFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in,
                               const torch::Tensor& t_in) {
    const torch::Tensor x = x_in.contiguous(), t = t_in.contiguous();
    const int64_t N = x.size(0), V = x.size(1);
    const int64_t* tp = t.data_ptr<int64_t>();
    int64_t counted = 0;
    for (int64_t i = 0; i < N; ++i) {
      TORCH_CHECK(tp[i] == kIgnored || (tp[i] >= 0 && tp[i] < V), "cross_entropy: target ", tp[i],
                  " is out of bounds (", V, " classes; -100 leaves a row out)");
      counted += tp[i] != kIgnored;
    }
    torch::Tensor ml = torch::zeros({N, 2}, x.options());  // each row's m and l
    torch::Tensor loss;
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "normlab_cross_entropy", [&] {
      const scalar_t* xp = x.data_ptr<scalar_t>();
      scalar_t* mp = ml.data_ptr<scalar_t>();
      at::parallel_for(0, N, kGrain, [&](int64_t r0, int64_t r1) {
        for (int64_t i = r0; i < r1; ++i)
          if (tp[i] != kIgnored) lse_row_any<scalar_t>(xp + i * V, V, mp + 2 * i);
      });
      double sum = 0.0;  // in float64, whatever the dtype: one term per row
      for (int64_t i = 0; i < N; ++i)
        if (tp[i] != kIgnored)
          sum += static_cast<double>(mp[2 * i] - xp[i * V + tp[i]]) + mp[2 * i + 1];
      // No row counted: 0 / 0, NaN, as ATen's mean over no rows.
      loss = torch::full({}, sum / static_cast<double>(counted), x.options());
    });
    ctx->save_for_backward({x, t, ml});
    ctx->saved_data["counted"] = counted;
    return loss;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &t = saved[1], &ml = saved[2];
    const int64_t counted = ctx->saved_data["counted"].toInt();
    const int64_t N = x.size(0), V = x.size(1);
    torch::Tensor dx = torch::empty_like(x);
    const double g = grads[0].item<double>();
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "normlab_cross_entropy_backward", [&] {
      const scalar_t *xp = x.data_ptr<scalar_t>(), *mp = ml.data_ptr<scalar_t>();
      const int64_t* tp = t.data_ptr<int64_t>();
      scalar_t* dp = dx.data_ptr<scalar_t>();
      const auto scale = static_cast<scalar_t>(g / static_cast<double>(counted));
      at::parallel_for(0, N, kGrain, [&](int64_t r0, int64_t r1) {
        for (int64_t i = r0; i < r1; ++i) {
          scalar_t* d = dp + i * V;
          if (tp[i] == kIgnored) {
            std::memset(d, 0, static_cast<size_t>(V) * sizeof(scalar_t));
            continue;
          }
          softmax_grad_row_any<scalar_t>(xp + i * V, mp + 2 * i, scale, d, V);
          d[tp[i]] -= scale;
        }
      });
    });
    return {dx, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  if (cpu_fusable(logits) && logits.dim() == 2 && logits.size(1) > 0 && targets.dim() == 1 &&
      targets.size(0) == logits.size(0) && targets.scalar_type() == torch::kLong &&
      targets.device().is_cpu())
    return CrossEntropyFn::apply(logits, targets);
  return torch::cross_entropy_loss(logits, targets);
}

}  // namespace normlab::fused
