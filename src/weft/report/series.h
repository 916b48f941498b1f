// Series small enough to draw: a chart of a 1,000-step run or a 1,024-GPU simulation keeps
// at most a few thousand points per series, chosen from the data (never invented), so a
// page opens quickly and every point drawn is a point of the file.
#pragma once

#include <cstddef>
#include <vector>

namespace weft::report {

// The indices (ascending) of the points to keep of a series with values `y`: every point
// when there are at most `max_points`, else, per bucket of consecutive points, the first,
// the lowest, the highest and the last, so peaks, dips and edges survive.
std::vector<std::size_t> decimate(const std::vector<double>& y, std::size_t max_points);

struct Curve {
  std::vector<double> x, y;
};

// The empirical distribution of `values` (non-empty): x the sorted values, y the fraction
// at or below each; at most `max_points` points (evenly spaced in rank, the largest kept).
Curve cdf(std::vector<double> values, std::size_t max_points);

// `values` at the kept `indices`.
std::vector<double> pick(const std::vector<double>& values, const std::vector<std::size_t>& indices);

}  // namespace weft::report
