// One row of float32 values as int8 codes with one symmetric scale (seed 003 chapter 8's
// "fewer bits"): the scale is the row's largest magnitude / 127, each code the value times
// the scale's inverse rounded to nearest (as llama.cpp's q8_0 rounds: a division an element
// was 3% of a 16-stream int8 decoding step) and clamped to [-127, 127]. The int8 products
// quantize each row of activations with it (serve/quantize.cpp), an int8 key-value cache
// each head's keys and values at a position (serve/decoder.cpp).
//
// quantize_int8_row(x, n, q) writes n codes to q and returns the scale and the codes' sum:
// a row of zeros (or one whose scale underflows) has scale 0, a row that holds an infinity
// or a NaN has scale NaN (whatever reads it becomes NaN, as the float32 values would make
// it); both with all codes 0. A subnormal scale, whose inverse overflows, divides instead.
// Inline and written to vectorize in the caller's instruction set (the dispatched loops'):
// the largest magnitude from the bits of |x| (in IEEE order as integers, NaN above
// infinity), and each code from values, not references, so that the loop's bounds cannot
// alias the int8 stores.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace weft::serve {

struct QuantizedRow {
  float scale;
  std::int32_t sum;
};

// The bits of |*x|.
inline std::uint32_t magnitude_bits(const float* x) {
  std::uint32_t bits;
  std::memcpy(&bits, x, sizeof bits);
  return bits & 0x7fffffffu;
}

inline QuantizedRow quantize_int8_row(const float* x, const std::int64_t n, std::int8_t* q) {
  std::uint32_t lane[8] = {};
  std::int64_t e = 0;
  for (; e + 8 <= n; e += 8)
    for (int l = 0; l < 8; ++l) lane[l] = std::max(lane[l], magnitude_bits(x + e + l));
  for (; e < n; ++e) lane[0] = std::max(lane[0], magnitude_bits(x + e));
  std::uint32_t top = 0;
  for (std::uint32_t v : lane) top = std::max(top, v);
  constexpr std::uint32_t kInfinity = 0x7f800000u;
  float m;
  std::memcpy(&m, &top, sizeof m);
  const float xs = m / 127.0f;
  if (top >= kInfinity || !(xs > 0)) {
    std::fill(q, q + n, std::int8_t{0});
    return {top >= kInfinity ? std::numeric_limits<float>::quiet_NaN() : 0.0f, 0};
  }
  const auto codes = [&](const auto& scaled) {
    std::int32_t sum = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const auto code = static_cast<std::int32_t>(std::min(127.0f, std::max(-127.0f, std::nearbyint(scaled(x[i])))));
      q[i] = static_cast<std::int8_t>(code);
      sum += code;
    }
    return QuantizedRow{xs, sum};
  };
  const float inverse = 1.0f / xs;
  if (!std::isfinite(inverse)) return codes([xs](float v) { return v / xs; });
  return codes([inverse](float v) { return v * inverse; });
}

}  // namespace weft::serve
