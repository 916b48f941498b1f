// Internal: the loop every element-wise kernel uses. Walks a shape in row-major order
// over K operands with their own strides, handing the kernel one innermost row at a time,
// compiled for each level of weft's dispatched loops (util/dispatch.h).
#pragma once

#include <array>
#include <cstdint>

#include "weft/tensor/tensor.h"
#include "weft/tensor/thread_pool.h"

namespace weft::detail {

constexpr std::int64_t kElementwiseGrain = 32768;

// inner(offsets, length, inner_strides): offsets are element offsets (from each
// operand's data pointer) of the row's first element. Rows run in parallel when
// `parallel` is set, so inner must only write the row it is given.
template <std::size_t K, class F>
void strided_rows(const Shape& shape, const std::array<Shape, K>& strides, bool parallel, F&& inner) {
  const std::int64_t nd = static_cast<std::int64_t>(shape.size());
  std::array<std::int64_t, K> zero{};
  if (nd == 0) {
    inner(zero, 1, zero);
    return;
  }
  const std::int64_t last = shape[nd - 1];
  const std::int64_t n = shape_numel(shape);
  if (n == 0) return;
  const std::int64_t rows = n / last;
  std::array<std::int64_t, K> inner_strides{};
  for (std::size_t k = 0; k < K; ++k) inner_strides[k] = strides[k][nd - 1];
  auto run = [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      std::array<std::int64_t, K> off{};
      std::int64_t rem = r;
      for (std::int64_t d = nd - 2; d >= 0; --d) {
        std::int64_t idx = rem % shape[d];
        rem /= shape[d];
        for (std::size_t k = 0; k < K; ++k) off[k] += idx * strides[k][d];
      }
      inner(off, last, inner_strides);
    }
  };
  if (parallel) {
    parallel_loop(rows, std::max<std::int64_t>(1, kElementwiseGrain / std::max<std::int64_t>(last, 1)), run);
  } else {
    dispatched(run, std::int64_t{0}, rows);
  }
}

}  // namespace weft::detail
