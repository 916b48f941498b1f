// exp and tanh for float arrays, written so the compiler vectorizes the loops that call them
// (libm's expf and tanhf are calls the vectorizer cannot see into). exp is Cephes' expf:
// x = n·ln2 + r with |r| <= ln2/2, a degree-6 polynomial for e^r, 2^n from the exponent
// bits; relative error below 2e-7 over the whole float range. Doubles use libm.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace weft {

inline float fast_exp(float x) {
  const float in = x;
  // Clamped so that NaN becomes a number too (each comparison with NaN is false): the
  // integer conversion below must never see NaN; the result for NaN comes from `in`.
  x = x > -87.3f ? x : -87.3f;
  x = x < 88.72f ? x : 88.72f;
  // n = round(x / ln2) with the 1.5·2^23 trick (exact without -ffast-math).
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^n in two factors, so n = 128 (x near the top of the range) stays representable.
  const std::int32_t ni = static_cast<std::int32_t>(n), half = ni >> 1;
  const std::int32_t bits1 = (half + 127) << 23, bits2 = (ni - half + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &bits1, sizeof s1);
  std::memcpy(&s2, &bits2, sizeof s2);
  const float y = p * s1 * s2;
  // Below the normal range: exactly 0 (so exp(-inf) = 0); overflow: inf; NaN stays NaN
  // (every comparison with NaN is false, so NaN falls through to `in`). Selects, no branches.
  const float low = in < -87.3f ? 0.0f : y;
  const float high = in > 88.72f ? std::numeric_limits<float>::infinity() : low;
  // NaN's pass-through as a bitwise select: as `cond ? high : in` the compiler branched and
  // then gave each arm its own copy of what the caller computes next (two divisions per
  // vector in GELU's gate, one of them of the NaN arm).
  const std::uint32_t nan = 0u - static_cast<std::uint32_t>(!(in >= -87.3f || in < -87.3f));
  std::uint32_t hb, ib;
  std::memcpy(&hb, &high, sizeof hb);
  std::memcpy(&ib, &in, sizeof ib);
  const std::uint32_t ob = (hb & ~nan) | (ib & nan);
  float out;
  std::memcpy(&out, &ob, sizeof out);
  return out;
}

// tanh(x) = 1 − 2 / (e^{2x} + 1); absolute error below 3e-7.
inline float fast_tanh(float x) {
  x = x < -10.0f ? -10.0f : (x > 10.0f ? 10.0f : x);
  return 1.0f - 2.0f / (fast_exp(2.0f * x) + 1.0f);
}

// Overloads that let templated kernels call one name for float and double.
inline float exp_of(float x) { return fast_exp(x); }
inline double exp_of(double x) { return std::exp(x); }
inline float tanh_of(float x) { return fast_tanh(x); }
inline double tanh_of(double x) { return std::tanh(x); }

}  // namespace weft
