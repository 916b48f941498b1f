#include "weft/util/stats.h"

#include <algorithm>
#include <cmath>

namespace weft {

double binomial_upper_tail(long long n, double p, long long k) {
  if (k <= 0) return 1;
  if (k > n || p <= 0) return 0;
  if (p >= 1) return 1;
  const double nn = static_cast<double>(n), lp = std::log(p), lq = std::log1p(-p), ln_n_factorial = std::lgamma(nn + 1);
  const double mode = std::floor((nn + 1) * p);
  double sum = 0;
  for (long long i = k; i <= n; ++i) {
    const double x = static_cast<double>(i);
    const double term = std::exp(ln_n_factorial - std::lgamma(x + 1) - std::lgamma(nn - x + 1) + x * lp + (nn - x) * lq);
    sum += term;
    if (x > mode && term < 1e-17 * sum) break;
  }
  return std::min(1.0, sum);
}

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
