// Dealing global batches to ranks: shares, blocks, weights, the rest of an epoch.
#include <gtest/gtest.h>

#include <limits>
#include <numeric>

#include "weft/data/deal.h"
#include "weft/util/error.h"

namespace weft {
namespace {

TEST(Deal, EvenSharesGiveTheFirstRanksTheRemainder) {
  EXPECT_EQ(proportional_shares(64, {1, 1, 1}), (std::vector<std::int64_t>{22, 21, 21}));
  EXPECT_EQ(proportional_shares(48, {1, 1, 1}), (std::vector<std::int64_t>{16, 16, 16}));
  const std::vector<std::int64_t> two_of_four = {1, 1, 0, 0};
  EXPECT_EQ(proportional_shares(2, {1, 1, 1, 1}), two_of_four);
}

TEST(Deal, SharesFollowTheSpeeds) {
  EXPECT_EQ(proportional_shares(64, {2, 1}), (std::vector<std::int64_t>{43, 21}));
  EXPECT_EQ(proportional_shares(64, {3, 1}), (std::vector<std::int64_t>{48, 16}));
  EXPECT_EQ(proportional_shares(10, {0.5, 0.25, 0.25}), (std::vector<std::int64_t>{5, 3, 2}));
  // Extreme speeds from outside (--dp-shares): their sum would overflow to infinity.
  EXPECT_EQ(proportional_shares(64, {1e308, 1e308}), (std::vector<std::int64_t>{32, 32}));
  EXPECT_EQ(proportional_shares(64, {1e308, 3e307, 1e-300}), (std::vector<std::int64_t>{49, 15, 0}));
  // Any speeds: the shares sum to the rows, and none is more than one row off its exact share.
  const std::vector<double> speeds = {1.7, 0.3, 2.9, 1e-3, 4.1};
  const double total = std::accumulate(speeds.begin(), speeds.end(), 0.0);
  for (std::int64_t rows : {1, 7, 64, 1000, 12345}) {
    const auto s = proportional_shares(rows, speeds);
    EXPECT_EQ(std::accumulate(s.begin(), s.end(), std::int64_t{0}), rows);
    for (std::size_t r = 0; r < s.size(); ++r) EXPECT_LT(std::abs(static_cast<double>(s[r]) - rows * speeds[r] / total), 1.0);
  }
}

TEST(Deal, BadSpeedsAreRefused) {
  EXPECT_THROW(proportional_shares(8, {}), ConfigError);
  EXPECT_THROW(proportional_shares(8, {1, 0}), ConfigError);
  EXPECT_THROW(proportional_shares(8, {1, -2}), ConfigError);
  EXPECT_THROW(proportional_shares(8, {1, std::numeric_limits<double>::quiet_NaN()}), ConfigError);
  EXPECT_THROW(proportional_shares(8, {1, std::numeric_limits<double>::infinity()}), ConfigError);
}

TEST(Deal, BlocksCoverTheBatchOnceAndWeightsAverageToOne) {
  for (const std::vector<double>& speeds : {std::vector<double>{1, 1, 1}, {2, 1}, {5, 1, 1, 3}}) {
    for (std::int64_t rows : {1, 2, 5, 64, 97}) {
      std::vector<int> owner(static_cast<std::size_t>(rows), -1);
      double weights = 0;
      for (int r = 0; r < static_cast<int>(speeds.size()); ++r) {
        const DealtRows d = deal_rows(rows, speeds, r);
        weights += d.weight;
        EXPECT_GE(d.first, 0);
        EXPECT_LE(d.first + d.count, rows);
        if (d.share == 0) {  // a placeholder: one row that counts for nothing
          EXPECT_EQ(d.count, 1);
          EXPECT_EQ(d.weight, 0.0);
          continue;
        }
        EXPECT_EQ(d.count, d.share);
        EXPECT_DOUBLE_EQ(d.weight, static_cast<double>(d.share) * static_cast<double>(speeds.size()) / rows);
        for (std::int64_t i = d.first; i < d.first + d.count; ++i) {
          EXPECT_EQ(owner[static_cast<std::size_t>(i)], -1) << "row " << i << " dealt twice";
          owner[static_cast<std::size_t>(i)] = r;
        }
      }
      for (std::int64_t i = 0; i < rows; ++i) EXPECT_NE(owner[static_cast<std::size_t>(i)], -1) << "row " << i;
      // The mean over the ranks of weight * (mean over its rows) is the mean over the batch.
      EXPECT_NEAR(weights, static_cast<double>(speeds.size()), 1e-12);
    }
  }
}

TEST(Deal, BlocksFollowRankOrder) {
  EXPECT_EQ(deal_rows(64, {1, 1, 1}, 0).first, 0);
  EXPECT_EQ(deal_rows(64, {1, 1, 1}, 1).first, 22);
  EXPECT_EQ(deal_rows(64, {1, 1, 1}, 2).first, 43);
}

TEST(Deal, BatchesLeftInAnEpoch) {
  EXPECT_EQ(batches_left(2400, 0, 48), 50);
  EXPECT_EQ(batches_left(2400, 960, 36), 40);  // 1440 rows: 40 batches exactly
  EXPECT_EQ(batches_left(2400, 960, 7), 206);  // the last one of 5 rows
  EXPECT_EQ(batches_left(2400, 2400, 7), 0);
  EXPECT_EQ(batches_left(100, 99, 64), 1);
}

}  // namespace
}  // namespace weft
