// The gradient noise scale from the two gradient estimates of data parallelism: on
// synthetic gradients of known signal and noise, the estimate lands near tr(Σ)/|G|².
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "weft/train/noise_scale.h"

using namespace weft;

namespace {

// Per-sample gradients G + N(0, sigma² I) in `dims` dimensions; `replicas` replicas of `rows`
// samples each, one step: S (the mean of the replicas' squared norms) and |G_B|².
struct Step {
  double small_sq_mean = 0, big_sq = 0;
};
Step synthetic_step(std::mt19937_64& gen, const std::vector<double>& signal, double sigma, int replicas, int rows) {
  std::normal_distribution<double> noise(0, sigma);
  const std::size_t dims = signal.size();
  std::vector<double> total(dims, 0);
  Step s;
  for (int r = 0; r < replicas; ++r) {
    std::vector<double> mine(dims, 0);
    for (int i = 0; i < rows; ++i)
      for (std::size_t d = 0; d < dims; ++d) mine[d] += signal[d] + noise(gen);
    double sq = 0;
    for (std::size_t d = 0; d < dims; ++d) {
      total[d] += mine[d];
      mine[d] /= rows;
      sq += mine[d] * mine[d];
    }
    s.small_sq_mean += sq / replicas;
  }
  for (std::size_t d = 0; d < dims; ++d) {
    const double mean = total[d] / (replicas * rows);
    s.big_sq += mean * mean;
  }
  return s;
}

}  // namespace

TEST(NoiseScale, EstimatesTraceOverSignal) {
  std::mt19937_64 gen(7);
  const std::vector<double> signal(64, 0.05);  // |G|² = 0.16
  for (double sigma : {0.5, 1.0, 2.0}) {
    const double expected = 64 * sigma * sigma / 0.16;  // tr(Σ) / |G|²: 100, 400, 1600
    NoiseScale noise(0.999);  // about the last 1000 steps: each step's estimate is noisy
    for (int step = 0; step < 4000; ++step) {
      const Step s = synthetic_step(gen, signal, sigma, 4, 16);
      noise.observe(s.small_sq_mean, 1.0 / 16, s.big_sq, 64);
    }
    ASSERT_TRUE(noise.value().has_value());
    EXPECT_NEAR(*noise.value() / expected, 1.0, 0.2) << "sigma " << sigma;
  }
}

TEST(NoiseScale, NeedsTwoBatchSizesAndEnoughSteps) {
  NoiseScale noise;
  for (int i = 0; i < 20; ++i) noise.observe(1.0, 1.0 / 64, 1.0, 64);  // one replica: b = B, nothing learned
  EXPECT_EQ(noise.steps(), 0);
  EXPECT_FALSE(noise.value().has_value());
  noise.observe(std::nan(""), 1.0 / 16, 0.5, 64);
  EXPECT_EQ(noise.steps(), 0);
  for (int i = 0; i < 9; ++i) noise.observe(2.0, 1.0 / 16, 0.5, 64);
  EXPECT_FALSE(noise.value().has_value());  // fewer than 10 steps
  noise.observe(2.0, 1.0 / 16, 0.5, 64);
  // tr = (2 - 0.5) / (1/16 - 1/64) = 32; |G|² = 0.5 - 32/64 = 0: no positive signal yet.
  EXPECT_FALSE(noise.value().has_value());
  NoiseScale clear;
  for (int i = 0; i < 10; ++i) clear.observe(1.5, 1.0 / 16, 0.75, 64);  // tr 16, |G|² 0.5: B_noise 32
  ASSERT_TRUE(clear.value().has_value());
  EXPECT_NEAR(*clear.value(), 32.0, 1e-9);
}
