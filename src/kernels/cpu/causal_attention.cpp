// kernels::causal_attention (ops.h): causal attention on the CPU as batched products over
// blocks of queries, each block against the keys up to its last query, with one-pass softmax
// kernels between the products.
//
// Forward, block i (queries q0 .. q1-1, keys 0 .. q1-1):
//   S = q_i k^T;  P = softmax(scale S) over the keys each query sees (the diagonal block masked
//   in the kernel);  o_i = P v
// Backward, with delta = rowsum(do * o) (= rowsum(P * dP)):
//   dv += P^T do_i;  dP = do_i v^T;  dS = scale P (dP - delta);  dq_i = dS k;  dk += dS^T q_i
// Every P is kept for the backward (B H T^2 / 2 floats and a block more), which is why
// causal_attention_fits bounds it.
//
// bfloat16 q, k, v are computed in float32: the per-head path widens a head's rows into its
// thread's buffers, runs the float32 products and softmax, and rounds the output and the
// gradients once when it stores them; the batched path converts whole tensors. P is float32.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <c10/core/impl/LocalDispatchKeySet.h>

#include "blas.h"
#include "isa.h"
#include "normlab/kernels/ops.h"

namespace normlab::kernels {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

using cpu::steps;
namespace blas = cpu::blas;

// Ops in its scope run in their inputs' dtypes: the batched path's products stay in the numbers
// it computes in under CPU autocast.
struct NoAutocast {
  c10::impl::ExcludeDispatchKeyGuard guard{c10::autocast_dispatch_keyset};
};

// The numbers the kernel computes in: float64 for float64, float32 for float32 and bfloat16.
torch::ScalarType compute_dtype(torch::ScalarType t) {
  return t == torch::kDouble ? t : torch::kFloat;
}

// Rows of queries a block takes: 64 up to 256 tokens, then a quarter of the sequence, so that
// the products stay large enough for the GEMMs and the upper key blocks skipped are a fair share.
int64_t block_rows(int64_t T) { return std::max<int64_t>(64, (T + 3) / 4); }

// ---- The softmax of a block and its backward, per row ------------------------------------------
// Row r of block [q0, q1) is query q0 + r, which sees keys 0 .. q0 + r (`seen`); the row holds
// n = q1 keys, the rest are zeroed (so P is 0 past `seen`, and the backward's bound only spares
// it the work). The bodies run on the lanes of isa.h (float32 per instruction set, float64 one
// number a lane).

// x = softmax(scale x) over the first `seen` entries, 0 after them.
struct SoftmaxRow {
  template <class L>
  static NORMLAB_ALWAYS_INLINE void run(typename L::Scalar* x, int64_t seen, int64_t n,
                                        typename L::Scalar scale) {
    using T = typename L::Scalar;
    const T m = cpu::row_max<L>(x, seen);
    const T inv = T(1) / cpu::exp_sum<L>(x, seen, m, scale, x);
    steps<L>(seen,
             [&](int64_t j, auto s) NORMLAB_INLINE_LAMBDA { s.store(x + j, s.load(x + j) * inv); });
    for (int64_t j = seen; j < n; ++j) x[j] = 0;
  }
};

// dS = scale P (dP - delta) in place of dP over the first `seen` entries, 0 after them.
struct SoftmaxBackwardRow {
  template <class L>
  static NORMLAB_ALWAYS_INLINE void run(typename L::Scalar* dp, const typename L::Scalar* p,
                                        typename L::Scalar delta, int64_t seen, int64_t n,
                                        typename L::Scalar scale) {
    steps<L>(seen, [&](int64_t j, auto s) NORMLAB_INLINE_LAMBDA {
      s.store(dp + j, s.load(p + j) * (s.load(dp + j) - delta) * scale);
    });
    for (int64_t j = seen; j < n; ++j) dp[j] = 0;
  }
};

// sum_j a[j] b[j]: delta's rows (rowsum(do * o)).
struct Dot {
  template <class L>
  static NORMLAB_ALWAYS_INLINE typename L::Scalar run(const typename L::Scalar* a,
                                                      const typename L::Scalar* b, int64_t n) {
    typename L::F sv = cpu::splat<L>(0);
    steps<L>(n,
             [&](int64_t j, auto s) NORMLAB_INLINE_LAMBDA { sv += s.load(a + j) * s.load(b + j); });
    return cpu::hsum<L>(sv);
  }
};

// P = softmax(scale S) in place over the block's rows, (BH, q1 - q0, q1).
void causal_softmax_(torch::Tensor& s, int64_t q0, double scale) {
  const int64_t rows = s.size(1), n = s.size(2), total = s.size(0) * rows;
  AT_DISPATCH_FLOATING_TYPES(s.scalar_type(), "normlab_causal_softmax", [&] {
    scalar_t* sp = s.data_ptr<scalar_t>();
    const auto sc = static_cast<scalar_t>(scale);
    at::parallel_for(0, total, 8, [&](int64_t r0, int64_t r1) {
      for (int64_t idx = r0; idx < r1; ++idx) {
        const int64_t seen = std::min(n, q0 + idx % rows + 1);
        cpu::run<SoftmaxRow, scalar_t>(sp + idx * n, seen, n, sc);
      }
    });
  });
}

// dS = scale P (dP - delta) in place of dP; delta (BH, T) for the whole sequence.
void causal_softmax_backward_(torch::Tensor& dp, const torch::Tensor& p, const torch::Tensor& delta,
                              int64_t q0, double scale) {
  const int64_t rows = dp.size(1), n = dp.size(2), total = dp.size(0) * rows;
  const int64_t T = delta.size(1);
  AT_DISPATCH_FLOATING_TYPES(dp.scalar_type(), "normlab_causal_softmax_backward", [&] {
    scalar_t* dpp = dp.data_ptr<scalar_t>();
    const scalar_t* pp = p.data_ptr<scalar_t>();
    const scalar_t* dl = delta.data_ptr<scalar_t>();
    const auto sc = static_cast<scalar_t>(scale);
    at::parallel_for(0, total, 8, [&](int64_t r0, int64_t r1) {
      for (int64_t idx = r0; idx < r1; ++idx) {
        const int64_t bh = idx / rows, q = q0 + idx % rows;
        cpu::run<SoftmaxBackwardRow, scalar_t>(dpp + idx * n, pp + idx * n, dl[bh * T + q],
                                               std::min(n, q + 1), n, sc);
      }
    });
  });
}

// ---- Batched: each block's products over all heads at once through ATen (at::bmm) -----------
// The path without a BLAS (blas::available() false): every product is one parallel region, and
// q, k, v and the gradients are copied to and from the heads' own layout.
struct BatchedCausalAttentionFn : torch::autograd::Function<BatchedCausalAttentionFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q_in,
                               const torch::Tensor& k_in, const torch::Tensor& v_in, double scale) {
    const NoAutocast own_dtypes;
    const int64_t B = q_in.size(0), H = q_in.size(1), T = q_in.size(2), D = q_in.size(3);
    const auto acc = compute_dtype(q_in.scalar_type());
    const torch::Tensor q = q_in.reshape({B * H, T, D}).to(acc).contiguous();
    const torch::Tensor k = k_in.reshape({B * H, T, D}).to(acc).contiguous();
    const torch::Tensor v = v_in.reshape({B * H, T, D}).to(acc).contiguous();
    torch::Tensor o = torch::empty_like(q);
    variable_list saved = {q, k, v, o};
    const int64_t tb = block_rows(T);
    for (int64_t q0 = 0; q0 < T; q0 += tb) {
      const int64_t q1 = std::min(T, q0 + tb);
      torch::Tensor p = at::bmm(q.narrow(1, q0, q1 - q0), k.narrow(1, 0, q1).transpose(1, 2));
      causal_softmax_(p, q0, scale);
      o.narrow(1, q0, q1 - q0).copy_(at::bmm(p, v.narrow(1, 0, q1)));
      saved.push_back(p);
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["dtype"] = q_in.scalar_type();
    return o.view({B, H, T, D}).to(q_in.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &o = saved[3];
    const NoAutocast own_dtypes;
    const double scale = ctx->saved_data["scale"].toDouble();
    const auto dtype = ctx->saved_data["dtype"].toScalarType();
    const int64_t BH = q.size(0), T = q.size(1), D = q.size(2);
    const std::vector<int64_t> shape = grads[0].sizes().vec();
    const torch::Tensor go = grads[0].reshape({BH, T, D}).to(q.scalar_type()).contiguous();
    const torch::Tensor delta = (go * o).sum(-1);  // (BH, T)
    torch::Tensor dq = torch::empty_like(q), dk = torch::zeros_like(k), dv = torch::zeros_like(v);
    const int64_t tb = block_rows(T);
    size_t block = 4;
    for (int64_t q0 = 0; q0 < T; q0 += tb, ++block) {
      const int64_t q1 = std::min(T, q0 + tb), rows = q1 - q0;
      const torch::Tensor& p = saved[block];
      const torch::Tensor go_i = go.narrow(1, q0, rows);
      dv.narrow(1, 0, q1).baddbmm_(p.transpose(1, 2), go_i);
      torch::Tensor ds = at::bmm(go_i, v.narrow(1, 0, q1).transpose(1, 2));
      causal_softmax_backward_(ds, p, delta, q0, scale);
      dq.narrow(1, q0, rows).copy_(at::bmm(ds, k.narrow(1, 0, q1)));
      dk.narrow(1, 0, q1).baddbmm_(ds.transpose(1, 2), q.narrow(1, q0, rows));
    }
    return {dq.view(shape).to(dtype), dk.view(shape).to(dtype), dv.view(shape).to(dtype),
            torch::Tensor()};
  }
};

// ---- Per head: one thread takes a head through all its blocks, on the BLAS ------------------
// One parallel region for the forward and one for the backward, over the B H heads; a head's
// q, k, v (T x D) and its blocks stay in the thread's cache. The products read and write each
// tensor in place through its strides (the model's (B, T, H, D) layout viewed as (B, H, T, D)),
// so nothing is copied to or from the heads' layout.

// A (B, H, T, D) tensor's heads as BLAS operands: head bh = b H + h starts at b stride(0) +
// h stride(1), its rows stride(2) apart; stride(3) is 1 (heads_ready).
template <class T>
struct HeadRows {
  T* data;
  int64_t heads, batch_stride, head_stride, ld;
  explicit HeadRows(const torch::Tensor& t)
      : data(t.data_ptr<T>()),
        heads(t.size(1)),
        batch_stride(t.stride(0)),
        head_stride(t.stride(1)),
        ld(t.stride(2)) {}
  T* head(int64_t bh) const { return data + bh / heads * batch_stride + bh % heads * head_stride; }
};

// t itself where its rows are BLAS operands (unit stride along D, rows at least D apart), else a
// contiguous copy.
torch::Tensor heads_ready(const torch::Tensor& t) {
  return t.stride(3) == 1 && t.stride(2) >= t.size(3) ? t : t.contiguous();
}

// Where each block's softmax starts within a head's kept values (rows x keys per block), and
// their total as the last entry.
std::vector<int64_t> block_offsets(int64_t T) {
  std::vector<int64_t> off = {0};
  for (int64_t q0 = 0, tb = block_rows(T); q0 < T; q0 += tb)
    off.push_back(off.back() + (std::min(T, q0 + tb) - q0) * std::min(T, q0 + tb));
  return off;
}

// An empty (B, H, T, D) in the model's (B, T, H, D) layout.
torch::Tensor empty_heads(const torch::Tensor& like) {
  return torch::empty({like.size(0), like.size(2), like.size(1), like.size(3)}, like.options())
      .transpose(1, 2);
}

// T rows of D numbers from src (rows lds apart) to dst (rows ldd apart), converted on the lanes:
// a bfloat16 head widened to float32, or float32 rounded to a bfloat16 head.
struct CopyRows {
  template <class L, class A, class B>
  static NORMLAB_ALWAYS_INLINE void run(const A* src, int64_t lds, B* dst, int64_t ldd, int64_t T,
                                        int64_t D) {
    for (int64_t t = 0; t < T; ++t)
      steps<L>(D, [&](int64_t j, auto s) NORMLAB_INLINE_LAMBDA {
        s.store(dst + t * ldd + j, s.load(src + t * lds + j));
      });
  }
};

// A head's T x D rows as the products read and write them, in the numbers the kernel computes
// in (A): float32 and float64 heads in place, in their own strides; bfloat16 heads in a thread's
// buffer (rows D apart), widened on in() and rounded on out().
template <class E>
struct HeadBuffers {
  using A = cpu::compute_t<E>;
  static constexpr bool kWide = !std::is_same_v<E, A>;
  std::vector<A> buf;
  int64_t T, D;
  HeadBuffers(int64_t count, int64_t T_, int64_t D_) : T(T_), D(D_) {
    if constexpr (kWide) buf.resize(static_cast<size_t>(count * T * D));
  }
  // Slot i's view of input head h (rows ld apart): h itself, or its rows widened into slot i.
  std::pair<const A*, int64_t> in(int i, const E* h, int64_t ld) {
    if constexpr (!kWide) {
      (void)i;
      return {h, ld};
    } else {
      A* b = buf.data() + i * T * D;
      cpu::run<CopyRows, E>(h, ld, b, D, T, D);
      return {b, D};
    }
  }
  // Slot i's view of output head h: h itself, or slot i, which out() rounds into h.
  std::pair<A*, int64_t> out_view(int i, E* h, int64_t ld) {
    if constexpr (!kWide) {
      (void)i;
      return {h, ld};
    } else {
      return {buf.data() + i * T * D, D};
    }
  }
  void out(int i, E* h, int64_t ld) {
    if constexpr (kWide) cpu::run<CopyRows, E>(buf.data() + i * T * D, D, h, ld, T, D);
    (void)i, (void)h, (void)ld;
  }
};

struct HeadsCausalAttentionFn : torch::autograd::Function<HeadsCausalAttentionFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q_in,
                               const torch::Tensor& k_in, const torch::Tensor& v_in, double scale) {
    const torch::Tensor q = heads_ready(q_in), k = heads_ready(k_in), v = heads_ready(v_in);
    const int64_t BH = q.size(0) * q.size(1), T = q.size(2), D = q.size(3), tb = block_rows(T);
    const std::vector<int64_t> off = block_offsets(T);
    torch::Tensor o = empty_heads(q);
    torch::Tensor p =
        torch::empty({BH, off.back()}, q.options().dtype(compute_dtype(q.scalar_type())));
    AT_DISPATCH_FLOATING_TYPES_AND(
        at::kBFloat16, q.scalar_type(), "normlab_causal_attention_heads", [&] {
          using acc_t = cpu::compute_t<scalar_t>;
          const HeadRows<scalar_t> Q(q), K(k), V(v), O(o);
          acc_t* pp = p.data_ptr<acc_t>();
          const auto sc = static_cast<acc_t>(scale);
          at::parallel_for(0, BH, 1, [&](int64_t h0, int64_t h1) {
            HeadBuffers<scalar_t> heads(4, T, D);  // q, k, v, o
            for (int64_t bh = h0; bh < h1; ++bh) {
              const auto [qh, lq] = heads.in(0, Q.head(bh), Q.ld);
              const auto [kh, lk] = heads.in(1, K.head(bh), K.ld);
              const auto [vh, lv] = heads.in(2, V.head(bh), V.ld);
              const auto [oh, lo] = heads.out_view(3, O.head(bh), O.ld);
              for (int64_t q0 = 0, i = 0; q0 < T; q0 += tb, ++i) {
                const int64_t q1 = std::min(T, q0 + tb), rows = q1 - q0;
                acc_t* s = pp + bh * off.back() + off[i];
                blas::gemm(false, true, rows, q1, D, 1, qh + q0 * lq, lq, kh, lk, 0, s, q1);
                for (int64_t r = 0; r < rows; ++r)
                  cpu::run<SoftmaxRow, acc_t>(s + r * q1, q0 + r + 1, q1, sc);
                blas::gemm(false, false, rows, D, q1, 1, s, q1, vh, lv, 0, oh + q0 * lo, lo);
              }
              heads.out(3, O.head(bh), O.ld);
            }
          });
        });
    ctx->save_for_backward({q, k, v, o, p});
    ctx->saved_data["scale"] = scale;
    return o;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &o = saved[3], &p = saved[4];
    const double scale = ctx->saved_data["scale"].toDouble();
    const torch::Tensor go = heads_ready(grads[0].to(q.scalar_type()));
    const int64_t BH = q.size(0) * q.size(1), T = q.size(2), D = q.size(3), tb = block_rows(T);
    const std::vector<int64_t> off = block_offsets(T);
    torch::Tensor dq = empty_heads(q), dk = empty_heads(k), dv = empty_heads(v);
    AT_DISPATCH_FLOATING_TYPES_AND(
        at::kBFloat16, q.scalar_type(), "normlab_causal_attention_heads_backward", [&] {
          using acc_t = cpu::compute_t<scalar_t>;
          const HeadRows<scalar_t> Q(q), K(k), V(v), O(o), GO(go), DQ(dq), DK(dk), DV(dv);
          // bfloat16 heads: delta = rowsum(do * o) would read the output as rounded, an error of
          // 2^-8 of each term that P spreads over every key's gradient; rowsum(P * dP), the same
          // sum, is float32 throughout (one more pass over each block's rows, against D per row).
          constexpr bool kWide = HeadBuffers<scalar_t>::kWide;
          const acc_t* pp = p.data_ptr<acc_t>();
          const auto sc = static_cast<acc_t>(scale);
          at::parallel_for(0, BH, 1, [&](int64_t h0, int64_t h1) {
            std::vector<acc_t> ds(static_cast<size_t>(tb * T)), delta(static_cast<size_t>(T));
            HeadBuffers<scalar_t> heads(8, T, D);  // q, k, v, o (float32 only), go, dq, dk, dv
            for (int64_t bh = h0; bh < h1; ++bh) {
              const auto [qh, lq] = heads.in(0, Q.head(bh), Q.ld);
              const auto [kh, lk] = heads.in(1, K.head(bh), K.ld);
              const auto [vh, lv] = heads.in(2, V.head(bh), V.ld);
              const auto [goh, lg] = heads.in(4, GO.head(bh), GO.ld);
              const auto [dqh, ldq] = heads.out_view(5, DQ.head(bh), DQ.ld);
              const auto [dkh, ldk] = heads.out_view(6, DK.head(bh), DK.ld);
              const auto [dvh, ldv] = heads.out_view(7, DV.head(bh), DV.ld);
              if constexpr (!kWide) {
                const auto [oh, lo] = heads.in(3, O.head(bh), O.ld);
                for (int64_t t = 0; t < T; ++t)  // delta = rowsum(do * o)
                  delta[t] = cpu::run<Dot, acc_t>(goh + t * lg, oh + t * lo, D);
              }
              // Last block first: it sees every key, so it writes dk and dv whole (beta 0) and the
              // blocks before it add to their first rows.
              for (int64_t i = static_cast<int64_t>(off.size()) - 2; i >= 0; --i) {
                const int64_t q0 = i * tb, q1 = std::min(T, q0 + tb), rows = q1 - q0;
                const acc_t beta = q1 == T ? 0 : 1;
                const acc_t* ph = pp + bh * off.back() + off[i];
                const acc_t* go_i = goh + q0 * lg;
                blas::gemm(true, false, q1, D, rows, 1, ph, q1, go_i, lg, beta, dvh, ldv);
                blas::gemm(false, true, rows, q1, D, 1, go_i, lg, vh, lv, 0, ds.data(), q1);
                if constexpr (kWide)  // delta = rowsum(P * dP), in float32 (see kWide)
                  for (int64_t r = 0; r < rows; ++r)
                    delta[q0 + r] =
                        cpu::run<Dot, acc_t>(ds.data() + r * q1, ph + r * q1, q0 + r + 1);
                for (int64_t r = 0; r < rows; ++r)
                  cpu::run<SoftmaxBackwardRow, acc_t>(ds.data() + r * q1, ph + r * q1,
                                                      delta[q0 + r], q0 + r + 1, q1, sc);
                blas::gemm(false, false, rows, D, q1, 1, ds.data(), q1, kh, lk, 0, dqh + q0 * ldq,
                           ldq);
                blas::gemm(true, false, q1, D, rows, 1, ds.data(), q1, qh + q0 * lq, lq, beta, dkh,
                           ldk);
              }
              heads.out(5, DQ.head(bh), DQ.ld);
              heads.out(6, DK.head(bh), DK.ld);
              heads.out(7, DV.head(bh), DV.ld);
            }
          });
        });
    return {dq, dk, dv, torch::Tensor()};
  }
};

}  // namespace

bool causal_attention_fits(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  if (!cpu_fusable(q) || q.dim() != 4 || k.sizes() != q.sizes() || v.sizes() != q.sizes() ||
      k.scalar_type() != q.scalar_type() || v.scalar_type() != q.scalar_type() || !k.is_cpu() ||
      !v.is_cpu() || q.numel() == 0)
    return false;
  // The kept softmax blocks, about B H T (T + block) / 2 values (float32 for bfloat16 heads),
  // within the bytes bound.
  const int64_t T = q.size(2), tb = block_rows(T);
  const double kept = static_cast<double>(q.size(0) * q.size(1)) * static_cast<double>(T) *
                      static_cast<double>(T + tb) / 2.0 *
                      static_cast<double>(q.scalar_type() == torch::kDouble ? 8 : 4);
  return T <= kCausalAttentionMaxTokens && kept <= kCausalAttentionMaxKeptBytes;
}

CausalAttentionPath causal_attention_path(int64_t batch_heads) {
  return blas::available() && batch_heads >= at::get_num_threads() ? CausalAttentionPath::PerHead
                                                                   : CausalAttentionPath::Batched;
}

bool causal_attention_preferred(int64_t batch_heads, int64_t tokens) {
  if (causal_attention_path(batch_heads) == CausalAttentionPath::PerHead) return true;
  const bool avx512 = cpu::isa() == cpu::Isa::Avx512;  // ATen's capability, fixed for the process
  return !avx512 || tokens >= kCausalAttentionAvx512MinTokens;
}

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, double scale) {
  return causal_attention(q, k, v, scale, causal_attention_path(q.size(0) * q.size(1)));
}

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, double scale, CausalAttentionPath path) {
  TORCH_CHECK(causal_attention_fits(q, k, v),
              "causal_attention: takes q, k, v of one shape (B, H, T, D), float32, float64 or "
              "bfloat16 on the CPU, T <= ",
              kCausalAttentionMaxTokens, " and the kept scores within ",
              kCausalAttentionMaxKeptBytes >> 20, " MiB: got ", q.sizes(), " ", q.scalar_type());
  if (path == CausalAttentionPath::Batched) return BatchedCausalAttentionFn::apply(q, k, v, scale);
  TORCH_CHECK(blas::available(),
              "causal_attention: the per-head path needs the BLAS GEMMs that this LibTorch does "
              "not export (docs/dependencies.md)");
  return HeadsCausalAttentionFn::apply(q, k, v, scale);
}

}  // namespace normlab::kernels
