// Summaries of measured values.
#pragma once

#include <vector>

namespace weft {

// The nearest-rank percentile (p in [0, 1]) of values sorted in increasing order: the
// smallest value with at least p of them at or below it (p 0: the first); 0 when empty.
double percentile_of_sorted(const std::vector<double>& sorted, double p);
// The same of values in any order.
double percentile(std::vector<double> values, double p);

// P(X >= k) for X ~ Binomial(n, p): the chance that at least k of n independent trials
// succeed, each with probability p in [0, 1]. 1 for k <= 0, 0 for k > n. Summed in log space
// from k up (to a relative 1e-17), so n in the millions costs at most n terms.
double binomial_upper_tail(long long n, double p, long long k);

// The average over about the last `tau_s` seconds (an exponential moving average in time) of
// a quantity that holds its value between changes, such as requests in flight. Exact
// whatever the times of the changes and of the readings: each change and each reading first
// weighs the value held since the previous one by how long it held. Times are seconds on one
// monotonic clock, never decreasing.
class TimeAverage {
 public:
  explicit TimeAverage(double tau_s) : tau_s_(tau_s) {}
  // The quantity becomes `value` at `now`.
  void set(double now, double value);
  // The average at `now`.
  double at(double now);

 private:
  void advance(double now);
  double tau_s_;
  double average_ = 0, value_ = 0, last_ = -1;
};

}  // namespace weft
