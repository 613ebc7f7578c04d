// The instruction-set layer of normlab's CPU kernels (private to src/kernels/). A kernel states
// its body once, as a struct with a member template over the lanes (lanes.h):
//
//   struct Scale {  // y = a x over a row
//     template <class L>
//     static NORMLAB_ALWAYS_INLINE void run(const typename L::Scalar* x, typename L::Scalar* y,
//                                           int64_t n, typename L::Scalar a) {
//       steps<L>(n, [&](int64_t j, auto s) NORMLAB_INLINE_LAMBDA {
//         s.store(y + j, s.load(x + j) * a);
//       });
//     }
//   };
//   ... run<Scale, scalar_t>(x, y, n, a);   // inside AT_DISPATCH_FLOATING_TYPES
//
// and run<K, T> does the rest: float32 runs the body on the lanes of the instruction set that
// isa() picked, in a function compiled for it; float64 (the tests' precision) runs it one number
// a lane, the formulas as written. A body whose rows may be bfloat16 takes its pointers' types
// as template parameters (template <class L, class E> run(const E* x, ...)): bfloat16 rows run
// on the float32 lanes, loaded and stored through lanes.h's conversions. No table to fill, no
// string to compare: a new kernel adds its body and calls run.
#pragma once

#include <cstdint>
#include <type_traits>

#include "lanes.h"

namespace normlab::kernels::cpu {

/// The instruction sets the float32 bodies are compiled for.
enum class Isa { Portable, Avx2, Avx512 };

/// The one the float32 bodies run on in this process: ATen's CPU capability ("AVX512" or "AVX2",
/// so ATEN_CPU_CAPABILITY lowers both together) where this build compiles per-instruction-set
/// bodies (GCC or Clang on x86-64), else Portable. Read once (capabilities.cpp).
Isa isa();

/// "AVX512", "AVX2" or "portable" (kernels::vector_isa()).
const char* isa_name(Isa isa);

/// Whether this build compiles the AVX2 and AVX-512 bodies (GCC or Clang on x86-64).
#if NORMLAB_LANES && defined(__x86_64__)
#define NORMLAB_VECTOR_ISAS 1
#define NORMLAB_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define NORMLAB_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
#else
#define NORMLAB_VECTOR_ISAS 0
#endif

namespace isa_detail {
#if NORMLAB_LANES
template <class K, class... A>
auto on_portable(A... a) {  // 16 bytes: the baseline's registers (SSE2 on x86-64)
  return K::template run<Lanes<float, 16>>(a...);
}
#else
template <class K, class... A>
auto on_portable(A... a) {
  return K::template run<One<float>>(a...);
}
#endif
#if NORMLAB_VECTOR_ISAS
template <class K, class... A>
NORMLAB_TARGET_AVX2 auto on_avx2(A... a) {
  return K::template run<Lanes<float, 32>>(a...);
}
template <class K, class... A>
NORMLAB_TARGET_AVX512 auto on_avx512(A... a) {
  return K::template run<Lanes<float, 64>>(a...);
}
#endif
}  // namespace isa_detail

/// K's body for numbers stored as T on the instruction set given: float32 and bfloat16 on float32
/// lanes (an instruction set this build does not compile runs the portable body; bfloat16 is
/// widened on load and rounded on store, lanes.h), float64 one number a lane. Only for an
/// instruction set the CPU runs (isa() or one below it): the tests compare them.
template <class K, class T, class... A>
auto run_on(Isa which, A... args) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bf16>,
                "the CPU kernels take float32, float64 and bfloat16");
  if constexpr (std::is_same_v<T, double>) {
    (void)which;
    return K::template run<One<double>>(args...);
  } else {
#if NORMLAB_VECTOR_ISAS
    if (which == Isa::Avx512) return isa_detail::on_avx512<K>(args...);
    if (which == Isa::Avx2) return isa_detail::on_avx2<K>(args...);
#endif
    (void)which;
    return isa_detail::on_portable<K>(args...);
  }
}

/// K's body for numbers of type T on this process's instruction set (isa()).
template <class K, class T, class... A>
auto run(A... args) {
  return run_on<K, T>(isa(), args...);
}

}  // namespace normlab::kernels::cpu
