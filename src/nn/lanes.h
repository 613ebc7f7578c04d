// Lanes of floats for normlab's CPU kernels (fused.cpp, fused_attention.cpp): GCC/Clang vector
// types, so one piece of code compiles for each instruction set in its own registers, and the
// kernels' functions per instruction set pick ATen's CPU capability (fused::vector_isa).
//
// The lane functions are always inlined into a function compiled for one instruction set
// (NORMLAB_VECTOR_ISA_FUNCTIONS below), so no vector crosses a call. Left to GCC's
// auto-vectoriser, an exp with a clamp became three branches computed in every lane, whose
// unused ones made denormals (a microcode assist each: 4x slower than ATen's kernels); written
// on vector types, each lane computes one formula.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__GNUC__)
#define NORMLAB_LANES 1
#define NORMLAB_ALWAYS_INLINE inline __attribute__((always_inline))
// GCC notes that a vector argument's ABI depends on the instruction set; the lane functions are
// always inlined, so it does not apply (GCC gives the note at the end of the file).
#pragma GCC diagnostic ignored "-Wpsabi"
#else
#define NORMLAB_LANES 0
#define NORMLAB_ALWAYS_INLINE inline
#endif

// Functions per instruction set on x86-64: NORMLAB_VECTOR_ISA_FUNCTIONS(M) expands M(name, attr,
// bytes) for AVX2 + FMA and AVX-512 (the portable lanes, 16 bytes, are compiled for the baseline
// without an attribute).
#if NORMLAB_LANES && defined(__x86_64__)
#define NORMLAB_VECTOR_ISAS 1
#define NORMLAB_VECTOR_ISA_FUNCTIONS(M)            \
  M(avx2, __attribute__((target("avx2,fma"))), 32) \
  M(avx512, __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma"))), 64)
#else
#define NORMLAB_VECTOR_ISAS 0
#define NORMLAB_VECTOR_ISA_FUNCTIONS(M)
#endif

namespace normlab::fused::lanes {

#if NORMLAB_LANES
// B bytes of floats: 16 (SSE2, the x86-64 baseline), 32 (AVX2), 64 (AVX-512).
template <int B>
struct Lanes {
  typedef float F __attribute__((vector_size(B)));
  typedef int32_t I __attribute__((vector_size(B)));
  typedef uint32_t U __attribute__((vector_size(B)));
  static constexpr int64_t n = B / 4;
};

// e^x: x = n ln2 + r, |r| <= ln2/2 (Cody-Waite), Cephes' degree-5 minimax polynomial for e^r,
// and 2^n put into the exponent bits. Within 2 ulp of std::exp on [-87, 88]; x is clamped to
// that range first, which changes only results that would under- or overflow
// (Fused.SwiGluMatchesTheComposition runs inputs far outside it). NaN stays NaN.
template <class L>
NORMLAB_ALWAYS_INLINE typename L::F exp(typename L::F x) {
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
}

template <class L>
NORMLAB_ALWAYS_INLINE typename L::F load(const float* p) {
  typename L::F x;
  std::memcpy(&x, p, sizeof x);
  return x;
}

template <class L>
NORMLAB_ALWAYS_INLINE void store(float* p, typename L::F x) {
  std::memcpy(p, &x, sizeof x);
}

template <class L>
NORMLAB_ALWAYS_INLINE typename L::F splat(float a) {
  return typename L::F{} + a;
}
#endif

}  // namespace normlab::fused::lanes
