// Sums written so that the compiler vectorizes them and every processor, thread count and
// dispatch level gets the same bits: the values go into 8 interleaved partial sums, added in
// a fixed order at the end (a single running sum is one chain of dependent additions that
// compilers may not reorder).
#pragma once

#include <cstdint>

namespace weft {

// value(0) + ... + value(n - 1), in 8 partial sums of type T.
template <class T, class F>
T sum8(std::int64_t n, const F& value) {
  T part[8] = {};
  std::int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int j = 0; j < 8; ++j) part[j] += value(k + j);
  for (int j = 0; k < n; ++k, ++j) part[j] += value(k);
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

}  // namespace weft
