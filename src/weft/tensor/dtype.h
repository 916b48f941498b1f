// Element types of tensors. Training runs in float32; float64 exists so that the
// gradient checker can verify every operation with finite differences in double. bfloat16
// is a storage type only (mixed precision keeps activations in it, see SavedTensor): it
// converts to and from the others, and no kernel computes in it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "weft/util/half_float.h"

namespace weft {

enum class DType : std::uint8_t { F32, F64, BF16 };

constexpr std::size_t dtype_size(DType t) { return t == DType::F32 ? 4 : t == DType::F64 ? 8 : 2; }
constexpr const char* dtype_name(DType t) { return t == DType::F32 ? "f32" : t == DType::F64 ? "f64" : "bf16"; }

// bfloat16: the upper half of a float32 (8 exponent bits, 7 mantissa bits).
struct bf16 {
  std::uint16_t bits;
};
// Round to nearest, ties to even; NaN stays NaN (util/half_float.h).
inline bf16 to_bf16(float f) { return bf16{bf16_from_float(f)}; }
inline float from_bf16(bf16 h) { return float_from_bf16(h.bits); }

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::F32; }
template <>
constexpr DType dtype_of<double>() { return DType::F64; }
template <>
constexpr DType dtype_of<bf16>() { return DType::BF16; }

[[noreturn]] void throw_bf16_compute();

// Calls f(T{}) with T = float or double according to `t` (the compute types; a bf16
// tensor must be converted first):
//   dispatch(t, [&](auto zero) { using T = decltype(zero); ... });
template <class F>
decltype(auto) dispatch(DType t, F&& f) {
  if (t == DType::BF16) throw_bf16_compute();
  if (t == DType::F32) return f(float{});
  return f(double{});
}

}  // namespace weft
