#include <gtest/gtest.h>

#include <cmath>

#include "weft/util/stats.h"

namespace weft {
namespace {

TEST(TimeAverage, ApproachesAHeldValueWithItsTimeConstant) {
  TimeAverage a(1.0);
  a.set(10, 4);
  EXPECT_EQ(a.at(10), 0);
  EXPECT_NEAR(a.at(11), 4 * (1 - std::exp(-1.0)), 1e-12);
  EXPECT_NEAR(a.at(30), 4, 1e-6);
}

TEST(TimeAverage, ReadingsInBetweenDoNotChangeIt) {
  TimeAverage often(0.5), once(0.5);
  double t = 0;
  for (int i = 0; i < 200; ++i, t += 0.013) {
    const double v = (i * 7) % 5;
    often.set(t, v);
    once.set(t, v);
    for (int k = 1; k < 5; ++k) often.at(t + 0.013 * k / 5);
  }
  EXPECT_NEAR(often.at(t), once.at(t), 1e-12);
}

// A request in flight 7 ms of every 7.1 (one client sending back to back), read just after
// each one ends: the average is the time in flight, not what the readings happen to see.
TEST(TimeAverage, CountsWhatHeldBetweenReadingsNotWhatEachReadingSees) {
  TimeAverage load(1.0);
  double t = 0;
  for (int i = 0; i < 1000; ++i) {
    load.set(t, 1);
    t += 0.007;
    load.set(t, 0);
    load.at(t);  // the reader woken by the request's end
    t += 0.0001;
  }
  EXPECT_NEAR(load.at(t), 0.007 / 0.0071, 0.01);
}

TEST(TimeAverage, AnEarlierTimeChangesNothing) {
  TimeAverage a(1.0);
  a.set(5, 2);
  const double at6 = a.at(6);
  EXPECT_EQ(a.at(5.5), at6);
  EXPECT_NEAR(a.at(7), 2 * (1 - std::exp(-2.0)), 1e-12);
}

TEST(BinomialUpperTail, AgreesWithTheSumOfTheProbabilities) {
  // Small cases by hand: 4 fair coins, at least 3 heads = 5/16; 4 trials of 1/4 all
  // succeeding = 1/256; the edges.
  EXPECT_NEAR(binomial_upper_tail(4, 0.5, 3), 5.0 / 16, 1e-15);
  EXPECT_NEAR(binomial_upper_tail(4, 0.25, 4), 1.0 / 256, 1e-15);
  EXPECT_EQ(binomial_upper_tail(4, 0.25, 0), 1);
  EXPECT_EQ(binomial_upper_tail(4, 0.25, 5), 0);
  EXPECT_EQ(binomial_upper_tail(4, 0.0, 1), 0);
  EXPECT_EQ(binomial_upper_tail(4, 1.0, 4), 1);
  // Large n against the normal tail: 1e6 trials of 1/2, at least the mean + 3 sigma.
  EXPECT_NEAR(binomial_upper_tail(1000000, 0.5, 501500), 0.00135, 0.00005);
  // Below the mode nearly everything: P(X >= 1) for n = 100, p = 1/2.
  EXPECT_NEAR(binomial_upper_tail(100, 0.5, 1), 1.0, 1e-15);
}

}  // namespace
}  // namespace weft
