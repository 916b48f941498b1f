// Summaries of measured values.
#pragma once

#include <vector>

namespace weft {

// The nearest-rank percentile (p in [0, 1]) of values sorted in increasing order: the
// smallest value with at least p of them at or below it (p 0: the first); 0 when empty.
double percentile_of_sorted(const std::vector<double>& sorted, double p);
// The same of values in any order.
double percentile(std::vector<double> values, double p);

}  // namespace weft
