// The gradient noise scale (McCandlish et al., "An Empirical Model of Large-Batch
// Training", 2018): B_noise = tr(Σ) / |G|², the batch beyond which a larger one mostly adds
// data per step rather than progress. Seed 003 chapter 11's adaptive data parallelism grows
// the workers (and with them the batch) as it rises during training.
//
// Data parallelism gives two gradient estimates each step for free: a replica's own (batch
// b_r) and the replicas' mean (batch B). With E|G_b|² = |G|² + tr(Σ)/b, the mean over the
// replicas of |G_{b_r}|² (S, with h the mean of 1/b_r) and |G_B|² give unbiased estimates
//   tr(Σ) = (S - |G_B|²) / (h - 1/B)        |G|² = |G_B|² - tr(Σ) / B
// each noisy, so both are averaged exponentially and their ratio taken.
#pragma once

#include <cstdint>
#include <optional>

namespace weft {

class NoiseScale {
 public:
  // `decay`: the weight of the past in the exponential averages.
  NoiseScale() = default;
  explicit NoiseScale(double decay) : decay_(decay) {}
  // One step: S and h over the replicas, |G_B|² and B. Steps with one replica (b = B) or
  // non-finite figures are left out.
  void observe(double small_sq_mean, double inverse_small_mean, double big_sq, double big_batch);
  // B_noise once at least `min_steps` were observed and the averaged |G|² is positive.
  std::optional<double> value(std::int64_t min_steps = 10) const;
  std::int64_t steps() const { return steps_; }

 private:
  double decay_ = 0.9;
  double trace_ = 0, signal_ = 0;  // the averages of tr(Σ) and |G|² (their start-up bias cancels in the ratio)
  std::int64_t steps_ = 0;
};

}  // namespace weft
