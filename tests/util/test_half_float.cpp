// float16 conversions: the vector ones (F16C where the processor has it) round exactly as
// the scalar ones, over every float16 value and over floats around every rounding boundary.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "weft/util/half_float.h"

using namespace weft;

TEST(HalfFloat, VectorConversionsMatchTheScalarOnes) {
  // Every float16 bit pattern but the NaNs (whose payloads may differ) widens alike.
  std::vector<std::uint16_t> all;
  for (std::uint32_t h = 0; h < 65536; ++h)
    if (!(((h >> 10) & 0x1f) == 31 && (h & 0x3ff) != 0)) all.push_back(static_cast<std::uint16_t>(h));
  std::vector<float> wide(all.size());
  floats_from_f16(all.data(), wide.data(), all.size());
  for (std::size_t i = 0; i < all.size(); ++i) ASSERT_EQ(float_bits(wide[i]), float_bits(float_from_f16(all[i]))) << all[i];
  // Floats at, just below and just above each float16 value and each midpoint narrow alike:
  // ties to even, subnormals, overflow to infinity at 65520.
  std::vector<float> floats;
  for (float w : wide) {
    if (!std::isfinite(w)) continue;
    const std::uint32_t u = float_bits(w);
    for (std::uint32_t d : {0u, 1u, 0x1000u - 1, 0x1000u, 0x1000u + 1, 0x2000u - 1}) {
      for (float f : {float_from_bits(u + d), float_from_bits(u - d)})
        if (!std::isnan(f)) floats.push_back(f);  // (a NaN's payload may differ)
    }
  }
  floats.push_back(65519.9f);
  floats.push_back(65520.0f);
  floats.push_back(1e30f);
  floats.push_back(-INFINITY);
  std::vector<std::uint16_t> narrow(floats.size());
  f16_from_floats(floats.data(), narrow.data(), floats.size());
  for (std::size_t i = 0; i < floats.size(); ++i) ASSERT_EQ(narrow[i], f16_from_float(floats[i])) << floats[i];
}
