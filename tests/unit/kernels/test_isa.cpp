// The instruction-set layer of the CPU kernels (src/kernels/cpu/isa.h, lanes.h): the choice that
// follows ATen, the lane width each instruction set runs, the tail rule, the horizontal
// reductions and the lanes' exp, on every instruction set this CPU runs (isa() and those below
// it; .ci/run's lowered passes take isa() down to AVX2 and the portable lanes).
#include <ATen/Version.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/isa.h"
#include "normlab/kernels/capabilities.h"
#include "support.h"

namespace cpu = normlab::kernels::cpu;
using cpu::Isa;

namespace {

// The instruction sets this process may run: isa() and every one below it.
std::vector<Isa> runnable_isas() {
  std::vector<Isa> out = {Isa::Portable};
  if (cpu::isa() == Isa::Avx2 || cpu::isa() == Isa::Avx512) out.push_back(Isa::Avx2);
  if (cpu::isa() == Isa::Avx512) out.push_back(Isa::Avx512);
  return out;
}

struct IsaWidth {
  template <class L>
  static NORMLAB_ALWAYS_INLINE int64_t run(int /*unused*/) {
    return L::n;
  }
};

// y = x + 1 over n numbers, by the tail rule.
struct IsaAddOne {
  template <class L>
  static NORMLAB_ALWAYS_INLINE void run(const typename L::Scalar* x, typename L::Scalar* y,
                                        int64_t n) {
    cpu::steps<L>(n, [&](int64_t j, auto s)
                         NORMLAB_INLINE_LAMBDA { s.store(y + j, s.load(x + j, 1000) + 1); });
  }
};

// The sum (padding filled with 1000, then kept out) and the maximum (padding filled with -inf)
// of n numbers.
struct IsaSumMax {
  template <class L>
  static NORMLAB_ALWAYS_INLINE void run(const typename L::Scalar* x, int64_t n,
                                        typename L::Scalar* out) {
    using T = typename L::Scalar;
    typename L::F sv = cpu::splat<L>(0), mv = cpu::splat<L>(-std::numeric_limits<T>::infinity());
    cpu::steps<L>(n, [&](int64_t j, auto s) NORMLAB_INLINE_LAMBDA {
      sv += s.keep(s.load(x + j, 1000));
      const auto xl = s.load(x + j, -std::numeric_limits<T>::infinity());
      mv = xl > mv ? xl : mv;
    });
    out[0] = cpu::hsum<L>(sv);
    out[1] = cpu::hmax<L>(mv);
  }
};

// y = 2 x over n numbers stored as In, written as Out (bfloat16 on either side or both).
struct IsaTwice {
  template <class L, class In, class Out>
  static NORMLAB_ALWAYS_INLINE void run(const In* x, Out* y, int64_t n) {
    cpu::steps<L>(
        n, [&](int64_t j, auto s) NORMLAB_INLINE_LAMBDA { s.store(y + j, s.load(x + j) * 2.0f); });
  }
};

struct IsaExp {
  template <class L>
  static NORMLAB_ALWAYS_INLINE void run(const typename L::Scalar* x, typename L::Scalar* y,
                                        int64_t n) {
    cpu::steps<L>(n, [&](int64_t j, auto s)
                         NORMLAB_INLINE_LAMBDA { s.store(y + j, cpu::exp<L>(s.load(x + j))); });
  }
};

}  // namespace

TEST(KernelsIsa, FollowsAtensCapability) {
  const std::string aten = at::get_cpu_capability();
  Isa want = Isa::Portable;
#if NORMLAB_VECTOR_ISAS
  if (aten == "AVX512") want = Isa::Avx512;
  if (aten == "AVX2") want = Isa::Avx2;
#endif
  EXPECT_EQ(cpu::isa(), want) << "ATen's capability " << aten;
  EXPECT_EQ(normlab::kernels::vector_isa(), cpu::isa_name(want));
}

TEST(KernelsIsa, EachInstructionSetRunsItsOwnLaneWidth) {
  for (const Isa isa : runnable_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    const int64_t want = !NORMLAB_LANES                              ? 1
                         : isa == Isa::Avx512 && NORMLAB_VECTOR_ISAS ? 16
                         : isa == Isa::Avx2 && NORMLAB_VECTOR_ISAS   ? 8
                                                                     : 4;
    EXPECT_EQ((cpu::run_on<IsaWidth, float>(isa, 0)), want);
    EXPECT_EQ((cpu::run_on<IsaWidth, double>(isa, 0)), 1) << "float64 runs one number a lane";
  }
}

// Every length from 0 to 40 (whole steps, a partial last step, and rows shorter than one step):
// each element written once with the lanes' formula, nothing past the row touched, the padding
// kept out of sums and maxima.
TEST(KernelsIsa, TheTailRuleTakesEachElementOnceAndNothingPastTheRow) {
  for (const Isa isa : runnable_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    for (int64_t n = 0; n <= 40; ++n) {
      std::vector<float> x(static_cast<size_t>(n) + 1), y(static_cast<size_t>(n) + 16, -7.0f);
      for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i + 1);
      cpu::run_on<IsaAddOne, float>(isa, x.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], static_cast<float>(i + 2)) << n << " " << i;
      for (int64_t i = n; i < n + 16; ++i) ASSERT_EQ(y[i], -7.0f) << "past a row of " << n;
      float out[2];
      cpu::run_on<IsaSumMax, float>(isa, x.data(), n, out);
      EXPECT_EQ(out[0], static_cast<float>(n * (n + 1) / 2)) << n;
      EXPECT_EQ(out[1], n ? static_cast<float>(n) : -std::numeric_limits<float>::infinity()) << n;
    }
  }
  double xd[5] = {3, -1, 4, 1, 5}, outd[2];
  cpu::run_on<IsaSumMax, double>(cpu::isa(), xd, 5, outd);
  EXPECT_EQ(outd[0], 12.0);
  EXPECT_EQ(outd[1], 5.0);
}

// The lanes' exp against std::exp in float64: within 2 ulp of the float32 result over [-87, 88]
// (the range it promises), on every instruction set; NaN stays NaN; float64 is std::exp itself.
TEST(KernelsIsa, ExpIsWithinTwoUlpOnEveryInstructionSet) {
  std::vector<float> x;
  for (int i = 0; i <= 17500; ++i) x.push_back(-87.0f + 0.01f * static_cast<float>(i));
  x.push_back(std::nanf(""));
  const int64_t n = static_cast<int64_t>(x.size());
  for (const Isa isa : runnable_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    std::vector<float> y(x.size());
    cpu::run_on<IsaExp, float>(isa, x.data(), y.data(), n);
    int bad = 0;
    for (int64_t i = 0; i + 1 < n; ++i) {
      const double want = std::exp(static_cast<double>(x[i]));
      const float wf = static_cast<float>(want);
      const double ulp = std::nextafter(wf, std::numeric_limits<float>::infinity()) - wf;
      if (std::abs(y[i] - want) > 2 * ulp && bad++ < 5)
        ADD_FAILURE() << "exp(" << x[i] << ") = " << y[i] << ", want " << want;
    }
    EXPECT_EQ(bad, 0);
    EXPECT_TRUE(std::isnan(y.back()));
  }
  double xd = 0.5, yd = 0;
  cpu::run_on<IsaExp, double>(cpu::isa(), &xd, &yd, 1);
  EXPECT_EQ(yd, std::exp(0.5));
}

// bfloat16 rows on the float32 lanes, on every instruction set and every length from 0 to 40:
// a load widens exactly, a store rounds as c10::BFloat16 does (to nearest, ties to even; NaN to
// a quiet NaN; overflow to infinity), nothing past the row is touched. The values cover ties
// both ways, the largest finite numbers, infinities, subnormals, signed zeros and NaNs.
TEST(KernelsIsa, Bfloat16RowsLoadExactlyAndStoreRoundedToNearestEven) {
  using bf16 = c10::BFloat16;
  const auto bits = [](uint32_t b) {
    float f;
    std::memcpy(&f, &b, sizeof f);
    return f;
  };
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> special = {0.0f,
                                -0.0f,
                                1.0f,
                                -1.5f,
                                inf,
                                -inf,
                                std::nanf(""),
                                -std::nanf(""),
                                bits(0x3F808000u),  // a tie below an even bfloat16: stays
                                bits(0x3F818000u),  // a tie above an odd one: rounds up
                                bits(0x3F808001u),
                                bits(0x3F807FFFu),
                                bits(0x7F7FFFFFu),  // the largest float: to inf
                                bits(0x7F7F0000u),
                                bits(0x00000001u),
                                bits(0x00008000u),
                                bits(0x80018000u),
                                bits(0x7F800001u),  // a signalling NaN
                                1e-40f,
                                -3.0e38f,
                                65504.0f,
                                0.1f,
                                -7.123f};
  for (const Isa isa : runnable_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    for (int64_t n = 0; n <= 40; ++n) {
      std::vector<float> x(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i)
        x[i] = special[static_cast<size_t>(i) % special.size()] * (i < 23 ? 0.5f : 1.0f);
      std::vector<bf16> y(static_cast<size_t>(n) + 16, bf16(-7.0f));
      cpu::run_on<IsaTwice, float>(isa, x.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const bf16 want(x[i] * 2.0f);
        if (std::isnan(static_cast<float>(want))) {
          ASSERT_TRUE(std::isnan(static_cast<float>(y[i]))) << n << " " << i;
          ASSERT_EQ(y[i].x, 0x7FC0) << "NaN is stored as c10 stores it, n " << n;
        } else {
          ASSERT_EQ(y[i].x, want.x) << "x " << x[i] << ", n " << n << ", i " << i;
        }
      }
      for (int64_t i = n; i < n + 16; ++i) ASSERT_EQ(static_cast<float>(y[i]), -7.0f);
      // Loads: bfloat16 in, float32 out, exact (2 y is exact in float32).
      std::vector<float> z(static_cast<size_t>(n) + 16, -7.0f);
      cpu::run_on<IsaTwice, bf16>(isa, y.data(), z.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const float want = static_cast<float>(y[i]) * 2.0f;
        if (std::isnan(want))
          ASSERT_TRUE(std::isnan(z[i]));
        else
          ASSERT_EQ(z[i], want) << n << " " << i;
      }
      for (int64_t i = n; i < n + 16; ++i) ASSERT_EQ(z[i], -7.0f);
    }
  }
}
