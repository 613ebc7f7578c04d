// exp for float that the compiler can vectorise (std::exp is a library call per element):
// Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2, Cephes' degree-5 minimax polynomial
// for e^r, and 2^n put into the exponent bits. Relative error below 2 ulp on [-87, 88]
// (tests/unit/test_fused.cpp checks it against std::exp); inputs are clamped to that range,
// which only matters for results that would under- or overflow anyway.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace normlab::fast {

inline float exp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);  // vectorises with -fno-trapping-math
  // n = round(x / ln2) by the 1.5 * 2^23 trick (no rounding-mode call, so it vectorises).
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  const float z = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * z + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return er * scale;
}

inline double exp(double x) { return std::exp(x); }

}  // namespace normlab::fast
