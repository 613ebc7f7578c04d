// kernels::cross_entropy (ops.h): the mean cross-entropy over rows of logits x (N, V) with
// targets t (N), as torch::cross_entropy_loss computes it (rows whose target is -100 left out):
//   m_i = max_j x_ij,  l_i = log sum_j e^(x_ij - m_i)
//   ce = sum_i ((m_i - x_i,t_i) + l_i) / n,   n = the rows counted
//   dx_ij = g (e^((x_ij - m_i) - l_i) - [j = t_i]) / n     (0 on the rows left out)
// The forward reads each row twice (its maximum, then the sum of exponentials, while the row is
// in cache) and keeps m and l apart (their sum, logsumexp, would lose l's digits to m's ulp in a
// row far from zero); the backward writes the gradient in one pass. ATen's composition
// writes the log-softmax forward, then fills and scatters the gradient of the picked entries and
// reads both back in the log-softmax backward. The rows' bodies run on the lanes of isa.h (float32
// per instruction set, float64 one number a lane, with std::exp). bfloat16 logits are computed in
// float32: m, l and the loss are float32 (as the loss of the logits converted to float32), the
// gradient is bfloat16, each entry rounded once.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "isa.h"
#include "normlab/kernels/ops.h"

namespace normlab::kernels {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

using cpu::steps;

constexpr int64_t kIgnored = -100;  // torch::cross_entropy_loss's default ignore_index
constexpr int64_t kGrain = 8;       // rows per task of at::parallel_for

// A row's maximum m and l = log sum e^(x - m), into ml[0] and ml[1]. The float32 lanes' exp
// clamps its argument at -87, so an entry more than 87 below the row's maximum counts e^-87
// (1.6e-38) instead of less: far below a float32 ulp of the sum, which is >= 1.
struct LogSumExpRow {
  template <class L, class E>
  static NORMLAB_ALWAYS_INLINE void run(const E* x, int64_t V, typename L::Scalar* ml) {
    ml[0] = cpu::row_max<L>(x, V);
    ml[1] = std::log(cpu::exp_sum<L>(x, V, ml[0], 1, nullptr));
  }
};

// dx = scale e^((x - m) - l), without the target's -scale (the caller subtracts it).
struct SoftmaxGradRow {
  template <class L, class E>
  static NORMLAB_ALWAYS_INLINE void run(const E* x, const typename L::Scalar* ml,
                                        typename L::Scalar scale, E* dx, int64_t V) {
    const typename L::F mm = cpu::splat<L>(ml[0]), ll = cpu::splat<L>(ml[1]),
                        sc = cpu::splat<L>(scale);
    steps<L>(V, [&](int64_t j, auto s) NORMLAB_INLINE_LAMBDA {
      s.store(dx + j, sc * cpu::exp<L>((s.load(x + j) - mm) - ll));
    });
  }
};

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
    torch::Tensor ml, loss;  // ml: each row's m and l
    AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "normlab_cross_entropy", [&] {
      using acc_t = cpu::compute_t<scalar_t>;
      const auto acc = x.options().dtype(c10::CppTypeToScalarType<acc_t>::value);
      ml = torch::zeros({N, 2}, acc);
      const scalar_t* xp = x.data_ptr<scalar_t>();
      acc_t* mp = ml.data_ptr<acc_t>();
      at::parallel_for(0, N, kGrain, [&](int64_t r0, int64_t r1) {
        for (int64_t i = r0; i < r1; ++i)
          if (tp[i] != kIgnored) cpu::run<LogSumExpRow, scalar_t>(xp + i * V, V, mp + 2 * i);
      });
      double sum = 0.0;  // in float64, whatever the dtype: one term per row
      for (int64_t i = 0; i < N; ++i)
        if (tp[i] != kIgnored)
          sum += static_cast<double>(mp[2 * i] - static_cast<acc_t>(xp[i * V + tp[i]])) +
                 mp[2 * i + 1];
      // No row counted: 0 / 0, NaN, as ATen's mean over no rows.
      loss = torch::full({}, sum / static_cast<double>(counted), acc);
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
    AT_DISPATCH_FLOATING_TYPES_AND(
        at::kBFloat16, x.scalar_type(), "normlab_cross_entropy_backward", [&] {
          using acc_t = cpu::compute_t<scalar_t>;
          const scalar_t* xp = x.data_ptr<scalar_t>();
          const acc_t* mp = ml.data_ptr<acc_t>();
          const int64_t* tp = t.data_ptr<int64_t>();
          scalar_t* dp = dx.data_ptr<scalar_t>();
          const auto scale = static_cast<acc_t>(g / static_cast<double>(counted));
          at::parallel_for(0, N, kGrain, [&](int64_t r0, int64_t r1) {
            for (int64_t i = r0; i < r1; ++i) {
              scalar_t* d = dp + i * V;
              if (tp[i] == kIgnored) {
                std::memset(d, 0, static_cast<size_t>(V) * sizeof(scalar_t));
                continue;
              }
              cpu::run<SoftmaxGradRow, scalar_t>(xp + i * V, mp + 2 * i, scale, d, V);
              if constexpr (std::is_same_v<scalar_t, acc_t>) {
                d[tp[i]] -= scale;
              } else {  // bfloat16: the target's entry from its float32 value, rounded once (its
                        // rounded softmax term minus scale would lose every digit where p is near
                        // 1)
                const acc_t xt = static_cast<acc_t>(xp[i * V + tp[i]]);
                d[tp[i]] = static_cast<scalar_t>(
                    scale * std::exp((xt - mp[2 * i]) - mp[2 * i + 1]) - scale);
              }
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

}  // namespace normlab::kernels
