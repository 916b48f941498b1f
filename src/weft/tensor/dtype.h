// Element types of tensors. Training runs in float32; float64 exists so that the
// gradient checker can verify every operation with finite differences in double.
#pragma once

#include <cstddef>
#include <cstdint>

namespace weft {

enum class DType : std::uint8_t { F32, F64 };

constexpr std::size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 8; }
constexpr const char* dtype_name(DType t) { return t == DType::F32 ? "f32" : "f64"; }

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::F32; }
template <>
constexpr DType dtype_of<double>() { return DType::F64; }

// Calls f(T{}) with T = float or double according to `t`:
//   dispatch(t, [&](auto zero) { using T = decltype(zero); ... });
template <class F>
decltype(auto) dispatch(DType t, F&& f) {
  if (t == DType::F32) return f(float{});
  return f(double{});
}

}  // namespace weft
