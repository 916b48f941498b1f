// 16-bit floating-point numbers as their bits, converted to and from float32:
//   bfloat16: the upper half of a float32 (8 exponent bits, 7 mantissa bits);
//   f16: IEEE 754 binary16 (5 exponent bits, 10 mantissa bits, subnormals; at most 65504).
// Float to 16 bits rounds to nearest, ties to even; NaN stays a (quiet) NaN; f16 overflows
// to infinity as IEEE conversion does. 16 bits to float is exact.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "weft/util/cpu.h"

namespace weft {

inline std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float float_from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline std::uint16_t bf16_from_float(float f) {
  std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}
inline float float_from_bf16(std::uint16_t h) { return float_from_bits(static_cast<std::uint32_t>(h) << 16); }

inline std::uint16_t f16_from_float(float f) {
  const std::uint32_t u = float_bits(f);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520: infinity
  if (a < 0x38800000u) {
    // Below 2^-14, f16's subnormals are multiples of 2^-24: adding 0.5 (whose ulp is 2^-24)
    // lets the float adder round the magnitude to one, ties to even.
    const float m = float_from_bits(a) + 0.5f;
    return static_cast<std::uint16_t>(sign | (float_bits(m) - 0x3f000000u));
  }
  a += (static_cast<std::uint32_t>(15 - 127) << 23) + 0xfffu + ((a >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (a >> 13));
}
inline float float_from_f16(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant × 2^-24, exact in float
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return float_from_bits(float_bits(v) | sign);
  }
  if (exp == 31) return float_from_bits(sign | 0x7f800000u | (mant << 13));
  return float_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

// Many at once: F16C's conversions (8 at a time) where the processor has them (a build for
// them, or weft's dispatched loops at the avx2 level or above: util/cpu.h), which round as
// the functions above do (they differ only in the payload a NaN keeps).
namespace detail {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define WEFT_F16C_TARGET __attribute__((target("avx,f16c")))
// Converts the first n - n % 8 elements; returns how many.
WEFT_F16C_TARGET inline std::size_t f16_from_floats_f16c(const float* in, std::uint16_t* out, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  return i;
}
WEFT_F16C_TARGET inline std::size_t floats_from_f16_f16c(const std::uint16_t* in, float* out, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  return i;
}
#undef WEFT_F16C_TARGET
inline bool use_f16c() {
#if defined(__F16C__)
  return true;
#else
  return cpu::loop_level() != cpu::Level::kBaseline;
#endif
}
#endif
}  // namespace detail

inline void f16_from_floats(const float* in, std::uint16_t* out, std::size_t n) {
  std::size_t i = 0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (detail::use_f16c()) i = detail::f16_from_floats_f16c(in, out, n);
#endif
  for (; i < n; ++i) out[i] = f16_from_float(in[i]);
}
inline void floats_from_f16(const std::uint16_t* in, float* out, std::size_t n) {
  std::size_t i = 0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (detail::use_f16c()) i = detail::floats_from_f16_f16c(in, out, n);
#endif
  for (; i < n; ++i) out[i] = float_from_f16(in[i]);
}

}  // namespace weft
