// Lanes of numbers for normlab's CPU kernels: GCC/Clang vector types, so that one kernel body
// compiles for each instruction set in its own registers; isa.h compiles it once per instruction
// set and picks one at run time.
//
// Why not ATen's at::vec::Vectorized: it picks its instruction set when its source is compiled
// (CPU_CAPABILITY, one copy of each kernel per capability under ATen's own build rules), and its
// headers (ATen/cpu/vec/) are ATen's internals, not LibTorch's public API. normlab's kernels are
// compiled once per instruction set with a target attribute and follow ATen's capability at run
// time; the vector types below need nothing but the compiler. Highway would give the same
// run-time choice as a dependency; these few operations do not need it yet (docs/dependencies.md).
//
// Every lane function is always inlined into a function compiled for one instruction set
// (isa.h), so no vector crosses a call. Left to GCC's auto-vectoriser, an exp with a clamp became
// three branches computed in every lane, whose unused ones made denormals (a microcode assist
// each: 4x slower than ATen's kernels); written on vector types, each lane computes one formula.
//
// The one tail rule (steps): a row of n numbers is walked in steps of L::n lanes; the last,
// partial step runs the same lane code on a padded copy (Part: loads fill the missing lanes with
// a value the caller names, stores write only the lanes that exist, keep() zeroes the others
// before a sum). So every element takes the same formula, whatever its position in the row.
//
// Storage and lanes: a float32 body also reads and writes bfloat16 rows (c10::BFloat16) in the
// same float32 lanes: a load widens each number exactly, a store rounds it to the nearest even
// bfloat16 (NaN to the quiet NaN 0x7FC0), as c10::BFloat16's own conversion does. So a bf16
// kernel computes in float32 and its output equals its float32 output converted with
// .to(torch::kBFloat16). The pointer's type picks the storage; the lanes stay float32.
#pragma once

#include <c10/util/BFloat16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__GNUC__)
#define NORMLAB_LANES 1
#define NORMLAB_ALWAYS_INLINE inline __attribute__((always_inline))
// A lambda inside a lane body: inlined as well, so that it is compiled for the caller's
// instruction set (a lambda does not inherit its enclosing function's target attribute).
#define NORMLAB_INLINE_LAMBDA __attribute__((always_inline))
// GCC notes that a vector argument's ABI depends on the instruction set; the lane functions are
// always inlined, so it does not apply (GCC gives the note at the end of the file).
#pragma GCC diagnostic ignored "-Wpsabi"
#else
#define NORMLAB_LANES 0
#define NORMLAB_ALWAYS_INLINE inline
#define NORMLAB_INLINE_LAMBDA
#endif

namespace normlab::kernels::cpu {

/// One number a lane: the float64 kernels, and every kernel where the compiler has no vector
/// types. Every lane operation below is then the plain formula on one number.
template <class T>
struct One {
  using Scalar = T;
  using F = T;
  static constexpr int64_t n = 1;
};

#if NORMLAB_LANES
/// B bytes of T: 16 (SSE2, the x86-64 baseline), 32 (AVX2), 64 (AVX-512).
template <class T, int B>
struct Lanes {
  using Scalar = T;
  typedef T F __attribute__((vector_size(B)));
  typedef int32_t I __attribute__((vector_size(B)));
  typedef uint32_t U __attribute__((vector_size(B)));
  static constexpr int64_t n = B / static_cast<int>(sizeof(T));
};
#endif

/// The numbers a body computes in for storage type E: float64 for float64, else float32.
template <class E>
using compute_t = std::conditional_t<std::is_same_v<E, double>, double, float>;

using bf16 = c10::BFloat16;

/// L::n numbers from p: of L's own type, or bfloat16 widened to float32 lanes.
template <class L, class E>
NORMLAB_ALWAYS_INLINE typename L::F load(const E* p) {
  if constexpr (std::is_same_v<E, typename L::Scalar>) {
    typename L::F x;
    std::memcpy(&x, p, sizeof x);
    return x;
  } else {
    static_assert(std::is_same_v<E, bf16> && std::is_same_v<typename L::Scalar, float>,
                  "bfloat16 rows load into float32 lanes");
    if constexpr (L::n == 1) {
      return static_cast<float>(*p);
    } else {
#if NORMLAB_LANES
      typedef uint16_t H __attribute__((vector_size(L::n * 2)));
      H h;
      std::memcpy(&h, p, sizeof h);
      // A bfloat16 is the upper half of the float32 with the same bits.
      return reinterpret_cast<typename L::F>(__builtin_convertvector(h, typename L::U) << 16);
#endif
    }
  }
}

/// x to L::n numbers at p: of L's own type, or rounded to bfloat16 (nearest even, NaN quiet).
template <class L, class E>
NORMLAB_ALWAYS_INLINE void store(E* p, typename L::F x) {
  if constexpr (std::is_same_v<E, typename L::Scalar>) {
    std::memcpy(p, &x, sizeof x);
  } else {
    static_assert(std::is_same_v<E, bf16> && std::is_same_v<typename L::Scalar, float>,
                  "float32 lanes store to bfloat16 rows");
    if constexpr (L::n == 1) {
      *p = bf16(x);
    } else {
#if NORMLAB_LANES
      using U = typename L::U;
      typedef uint16_t H __attribute__((vector_size(L::n * 2)));
      const U b = reinterpret_cast<U>(x);
      U r = (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;
      r = x != x ? U{} + 0x7FC0u : r;
      const H h = __builtin_convertvector(r, H);
      std::memcpy(p, &h, sizeof h);
#endif
    }
  }
}

template <class L>
NORMLAB_ALWAYS_INLINE typename L::F splat(typename L::Scalar a) {
  return typename L::F{} + a;
}

/// The sum of the lanes, lane 0 first.
template <class L>
NORMLAB_ALWAYS_INLINE typename L::Scalar hsum(typename L::F v) {
  if constexpr (L::n == 1) {
    return v;
  } else {
    typename L::Scalar s = 0;
    for (int64_t k = 0; k < L::n; ++k) s += v[k];
    return s;
  }
}

/// The largest lane; NaN lanes are passed over, as the lane-wise `a > b ? a : b` does.
template <class L>
NORMLAB_ALWAYS_INLINE typename L::Scalar hmax(typename L::F v) {
  typename L::Scalar m = -std::numeric_limits<typename L::Scalar>::infinity();
  if constexpr (L::n == 1) {
    m = v > m ? v : m;
  } else {
    for (int64_t k = 0; k < L::n; ++k) m = v[k] > m ? v[k] : m;
  }
  return m;
}

/// e^x. One<T>: std::exp. float lanes: x = n ln2 + r, |r| <= ln2/2 (Cody-Waite), Cephes'
/// degree-5 minimax polynomial for e^r, and 2^n put into the exponent bits. Within 2 ulp of
/// std::exp on [-87, 88]; x is clamped to that range first, which changes only results that
/// would under- or overflow (the SwiGLU tests run inputs far outside it). NaN stays NaN.
template <class L>
NORMLAB_ALWAYS_INLINE typename L::F exp(typename L::F x) {
  if constexpr (L::n == 1) {
    return std::exp(x);
  } else {
#if NORMLAB_LANES
    static_assert(sizeof(typename L::Scalar) == 4, "the lanes' exp is float32's");
    using F = typename L::F;
    const F lo = F{} - 87.0f, hi = F{} + 88.0f;
    x = x < lo ? lo : x;
    x = x > hi ? hi : x;
    const F magic = F{} + 12582912.0f;  // 1.5 * 2^23: adding and removing it rounds to an integer
    const F n = (x * 1.44269504088896341f + magic) - magic;
    const F r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
    F p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const F er = p * (r * r) + r + 1.0f;
    const typename L::U bits =
        (reinterpret_cast<typename L::U>(__builtin_convertvector(n, typename L::I)) + 127u) << 23;
    return er * reinterpret_cast<F>(bits);
#endif
  }
}

/// A whole step of a row: L::n numbers from p on.
template <class L>
struct Full {
  using S = typename L::Scalar;
  template <class E>
  NORMLAB_ALWAYS_INLINE typename L::F load(const E* p, S = 0) const {
    return cpu::load<L>(p);
  }
  template <class E>
  NORMLAB_ALWAYS_INLINE void store(E* p, typename L::F x) const {
    cpu::store<L>(p, x);
  }
  NORMLAB_ALWAYS_INLINE typename L::F keep(typename L::F x) const { return x; }
};

/// The last step of a row, `count` < L::n numbers: a padded copy (see the tail rule above).
template <class L>
struct Part {
  using S = typename L::Scalar;
  int64_t count;
  template <class E>
  NORMLAB_ALWAYS_INLINE typename L::F load(const E* p, S fill = 0) const {
    S buf[L::n];
    for (int64_t k = 0; k < L::n; ++k) buf[k] = fill;
    if constexpr (std::is_same_v<E, S>) {
      std::memcpy(buf, p, static_cast<size_t>(count) * sizeof(S));
    } else {
      for (int64_t k = 0; k < count; ++k) buf[k] = static_cast<S>(p[k]);
    }
    return cpu::load<L>(buf);
  }
  template <class E>
  NORMLAB_ALWAYS_INLINE void store(E* p, typename L::F x) const {
    E buf[L::n];
    cpu::store<L>(buf, x);
    std::memcpy(p, buf, static_cast<size_t>(count) * sizeof(E));
  }
  /// x with the lanes past `count` zeroed, before they join a sum.
  NORMLAB_ALWAYS_INLINE typename L::F keep(typename L::F x) const {
    S buf[L::n];
    cpu::store<L>(buf, x);
    for (int64_t k = count; k < L::n; ++k) buf[k] = 0;
    return cpu::load<L>(buf);
  }
};

/// fn(j, step) for j = 0, L::n, 2 L::n, ... < n: step is Full<L> for each whole step and
/// Part<L> for the last, partial one (the tail rule above).
template <class L, class Fn>
NORMLAB_ALWAYS_INLINE void steps(int64_t n, Fn&& fn) {
  int64_t j = 0;
  for (; j + L::n <= n; j += L::n) fn(j, Full<L>{});
  if (j < n) fn(j, Part<L>{n - j});
}

/// The largest of x[0, n) by the tail rule, -inf for none (NaN passed over, as hmax).
template <class L, class E>
NORMLAB_ALWAYS_INLINE typename L::Scalar row_max(const E* x, int64_t n) {
  const typename L::Scalar inf = std::numeric_limits<typename L::Scalar>::infinity();
  typename L::F mv = splat<L>(-inf);
  steps<L>(n, [&](int64_t j, auto s) NORMLAB_INLINE_LAMBDA {
    const auto xl = s.load(x + j, -inf);
    mv = xl > mv ? xl : mv;
  });
  return hmax<L>(mv);
}

/// sum_j e^(scale (x_j - m)) over x[0, n), each term also written to out[j] where out is not
/// null: a softmax's or a log-sum-exp's sum after row_max (m), by the tail rule.
template <class L, class E>
NORMLAB_ALWAYS_INLINE typename L::Scalar exp_sum(const E* x, int64_t n, typename L::Scalar m,
                                                 typename L::Scalar scale,
                                                 typename L::Scalar* out) {
  typename L::F sv = splat<L>(0);
  steps<L>(n, [&](int64_t j, auto s) NORMLAB_INLINE_LAMBDA {
    const auto e = exp<L>((s.load(x + j, m) - m) * scale);
    if (out) s.store(out + j, e);
    sv += s.keep(e);
  });
  return hsum<L>(sv);
}

}  // namespace normlab::kernels::cpu
