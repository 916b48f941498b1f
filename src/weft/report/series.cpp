#include "weft/report/series.h"

#include <algorithm>

namespace weft::report {

std::vector<std::size_t> decimate(const std::vector<double>& y, std::size_t max_points) {
  const std::size_t n = y.size();
  std::vector<std::size_t> keep;
  if (n <= max_points || max_points < 4) {
    keep.resize(n);
    for (std::size_t i = 0; i < n; ++i) keep[i] = i;
    return keep;
  }
  const std::size_t buckets = max_points / 4;
  for (std::size_t b = 0; b < buckets; ++b) {
    const std::size_t lo = n * b / buckets, hi = n * (b + 1) / buckets;  // [lo, hi)
    if (lo >= hi) continue;
    std::size_t low = lo, high = lo;
    for (std::size_t i = lo; i < hi; ++i) {
      if (y[i] < y[low]) low = i;
      if (y[i] > y[high]) high = i;
    }
    std::size_t four[4] = {lo, std::min(low, high), std::max(low, high), hi - 1};
    for (std::size_t i : four)
      if (keep.empty() || keep.back() < i) keep.push_back(i);
  }
  return keep;
}

Curve cdf(std::vector<double> values, std::size_t max_points) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  Curve c;
  const std::size_t points = std::max<std::size_t>(2, std::min(n, max_points));
  for (std::size_t k = 0; k < points; ++k) {
    const std::size_t i = points == n ? k : (n - 1) * k / (points - 1);
    if (!c.x.empty() && i + 1 < n && values[i] == values[i + 1]) continue;  // one point per value: its last rank
    c.x.push_back(values[i]);
    c.y.push_back(static_cast<double>(i + 1) / static_cast<double>(n));
  }
  return c;
}

std::vector<double> pick(const std::vector<double>& values, const std::vector<std::size_t>& indices) {
  std::vector<double> out;
  out.reserve(indices.size());
  for (std::size_t i : indices) out.push_back(values[i]);
  return out;
}

}  // namespace weft::report
