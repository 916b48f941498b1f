// Stage partitioning of the pipeline: contiguous blocks, the embedding on the first stage
// and the head on the last, the largest stage as small as possible.
#include <cmath>
#include <gtest/gtest.h>

#include "weft/parallel/pipeline.h"
#include "weft/util/error.h"

using weft::parallel::balance_blocks;

TEST(PipelineBalance, EqualBlocksSplitEvenly) {
  EXPECT_EQ(balance_blocks(std::vector<double>(8, 1.0), 4, 0, 0), (std::vector<std::int64_t>{0, 2, 4, 6, 8}));
  EXPECT_EQ(balance_blocks(std::vector<double>(8, 1.0), 8, 0, 0), (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(balance_blocks(std::vector<double>(3, 1.0), 1, 0, 0), (std::vector<std::int64_t>{0, 3}));
}

TEST(PipelineBalance, HeavyEndsGetFewerBlocks) {
  // A large vocabulary: the head costs as much as 3 blocks, the embedding as 1.
  auto b = balance_blocks(std::vector<double>(12, 1.0), 4, 1.0, 3.0);
  EXPECT_EQ(b.front(), 0);
  EXPECT_EQ(b.back(), 12);
  ASSERT_EQ(b.size(), 5u);
  EXPECT_LT(b[4] - b[3], b[2] - b[1]);  // the last stage holds fewer blocks than a middle one
  double worst = 0;
  for (std::size_t p = 0; p + 1 < b.size(); ++p) {
    double cost = static_cast<double>(b[p + 1] - b[p]) + (p == 0 ? 1.0 : 0.0) + (p + 2 == b.size() ? 3.0 : 0.0);
    worst = std::max(worst, cost);
  }
  EXPECT_EQ(worst, 4.0);  // 16 units over 4 stages: the best possible
}

TEST(PipelineBalance, UnevenBlocksAndTooManyStages) {
  auto b = balance_blocks({5, 1, 1, 1, 1, 1}, 2, 0, 0);
  EXPECT_EQ(b, (std::vector<std::int64_t>{0, 1, 6}));
  auto c = balance_blocks({1, 1, 1, 1}, 4, 10, 0);  // every stage gets a block even when one dominates
  EXPECT_EQ(c, (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
  EXPECT_THROW(balance_blocks({1, 1}, 3, 0, 0), weft::ConfigError);
}

TEST(PipelineBalance, StagesOfDifferentSpeeds) {
  // 12 equal blocks on a rank 3 times as fast and one of speed 1: 9 and 3 (each 3 units of time).
  EXPECT_EQ(balance_blocks(std::vector<double>(12, 1.0), 2, 0, 0, {3, 1}), (std::vector<std::int64_t>{0, 9, 12}));
  EXPECT_EQ(balance_blocks(std::vector<double>(12, 1.0), 2, 0, 0, {1, 3}), (std::vector<std::int64_t>{0, 3, 12}));
  // Equal speeds are the plain partition; the interleaved schedule's virtual stage v runs at speeds[v % stages].
  EXPECT_EQ(balance_blocks(std::vector<double>(8, 1.0), 2, 0, 0, {2, 2}), balance_blocks(std::vector<double>(8, 1.0), 2, 0, 0));
  EXPECT_EQ(balance_blocks(std::vector<double>(12, 1.0), 4, 0, 0, {2, 1}), (std::vector<std::int64_t>{0, 4, 6, 10, 12}));
  EXPECT_THROW(balance_blocks({1, 1}, 2, 0, 0, {1, 0}), weft::ConfigError);
  EXPECT_THROW(balance_blocks({1, 1}, 2, 0, 0, {1, std::nan("")}), weft::ConfigError);
}
