// Dealing a global batch to data-parallel ranks, evenly or in proportion to their speeds
// (seed 003 chapter 11: adaptive data parallelism; chapter 12: heterogeneous workers).
//
// An epoch is one order of its samples walked in global batches of B rows from a position
// (the samples of the epoch already trained): batch k of the rest is order[at + kB, at +
// (k+1)B), the last one shorter. Nothing about the ranks enters that order, so a run may
// change its number of ranks, or their shares, at any step and every sample of the epoch is
// still trained exactly once.
//
// A global batch of `rows` is split into consecutive blocks, rank 0's first, their sizes in
// proportion to the ranks' speeds (equal speeds: the even split, the first rows % ranks
// ranks one row more). Each rank's loss is the mean over its block; scaled by its `weight`
// = share * ranks / rows, the data-parallel mean of the ranks' gradients is the gradient of
// the whole batch's mean loss, whatever the split. A rank whose share is zero (a short last
// batch, a very slow rank) still computes on one row, the batch's first, with weight 0, so
// that every rank takes part in every collective.
#pragma once

#include <cstdint>
#include <vector>

namespace weft {

// Shares of `rows` in proportion to `speeds` (each finite and > 0; ConfigError otherwise):
// the floors of the exact shares, then one more row to the largest remainders (ties: the
// lower rank). They sum to `rows`.
std::vector<std::int64_t> proportional_shares(std::int64_t rows, const std::vector<double>& speeds);

struct DealtRows {
  std::int64_t first = 0, count = 0;  // the rows [first, first + count) of the global batch
  std::int64_t share = 0;             // the rows that count (0: one placeholder row, weight 0)
  double weight = 1;                  // share * ranks / rows
};

// Rank `rank`'s rows of a global batch of `rows` (>= 1) among ranks of these speeds.
DealtRows deal_rows(std::int64_t rows, const std::vector<double>& speeds, int rank);

// Global batches of `batch` rows left in an epoch of `rows` samples after `at` of them.
std::int64_t batches_left(std::int64_t rows, std::int64_t at, std::int64_t batch);

}  // namespace weft
