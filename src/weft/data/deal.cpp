#include "weft/data/deal.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "weft/util/error.h"

namespace weft {

std::vector<std::int64_t> proportional_shares(std::int64_t rows, const std::vector<double>& speeds) {
  if (speeds.empty()) throw ConfigError("batch shares: no ranks");
  if (rows < 0) throw ConfigError("batch shares: " + std::to_string(rows) + " rows");
  double largest = 0;
  for (double s : speeds) {
    if (!std::isfinite(s) || s <= 0) throw ConfigError("batch shares: a rank's speed must be a positive number");
    largest = std::max(largest, s);
  }
  // Relative to the largest, so that the sum stays finite (speeds of 1e308 add up to inf).
  double total = 0;
  for (double s : speeds) total += s / largest;
  std::vector<std::int64_t> shares(speeds.size());
  std::vector<double> remainder(speeds.size());
  std::int64_t dealt = 0;
  for (std::size_t r = 0; r < speeds.size(); ++r) {
    // Equal speeds: exact quotients.
    const double exact = static_cast<double>(rows) * (speeds[r] / largest) / total;
    shares[r] = std::min<std::int64_t>(static_cast<std::int64_t>(std::floor(exact)), rows - dealt);
    remainder[r] = exact - static_cast<double>(shares[r]);
    dealt += shares[r];
  }
  std::vector<std::size_t> by_remainder(speeds.size());
  std::iota(by_remainder.begin(), by_remainder.end(), 0);
  std::stable_sort(by_remainder.begin(), by_remainder.end(),
                   [&](std::size_t a, std::size_t b) { return remainder[a] > remainder[b]; });
  for (std::size_t i = 0; dealt < rows; i = (i + 1) % by_remainder.size(), ++dealt) ++shares[by_remainder[i]];
  return shares;
}

DealtRows deal_rows(std::int64_t rows, const std::vector<double>& speeds, int rank) {
  WEFT_CHECK(rows >= 1 && rank >= 0 && rank < static_cast<int>(speeds.size()), "deal_rows: bad arguments");
  const std::vector<std::int64_t> shares = proportional_shares(rows, speeds);
  DealtRows d;
  d.first = std::accumulate(shares.begin(), shares.begin() + rank, std::int64_t{0});
  d.share = shares[static_cast<std::size_t>(rank)];
  d.count = d.share;
  if (d.share == 0) d.first = 0, d.count = 1;  // a placeholder row that counts for nothing
  d.weight = static_cast<double>(d.share) * static_cast<double>(speeds.size()) / static_cast<double>(rows);
  return d;
}

std::int64_t batches_left(std::int64_t rows, std::int64_t at, std::int64_t batch) {
  WEFT_CHECK(batch >= 1 && at >= 0, "batches_left: bad arguments");
  return at >= rows ? 0 : (rows - at + batch - 1) / batch;
}

}  // namespace weft
