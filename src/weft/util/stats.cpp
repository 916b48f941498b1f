#include "weft/util/stats.h"

#include <algorithm>
#include <cmath>

namespace weft {

double percentile_of_sorted(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
}

double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return percentile_of_sorted(values, p);
}

void TimeAverage::advance(double now) {
  if (last_ >= 0 && now > last_) average_ += (1 - std::exp(-(now - last_) / tau_s_)) * (value_ - average_);
  if (last_ < 0 || now > last_) last_ = now;
}

void TimeAverage::set(double now, double value) {
  advance(now);
  value_ = value;
}

double TimeAverage::at(double now) {
  advance(now);
  return average_;
}

}  // namespace weft
