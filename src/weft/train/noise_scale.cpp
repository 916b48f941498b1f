#include "weft/train/noise_scale.h"

#include <cmath>

namespace weft {

void NoiseScale::observe(double small_sq_mean, double inverse_small_mean, double big_sq, double big_batch) {
  const double spread = inverse_small_mean - 1.0 / big_batch;
  if (!(spread > 0) || !std::isfinite(small_sq_mean) || !std::isfinite(big_sq)) return;
  const double trace = (small_sq_mean - big_sq) / spread;
  const double signal = big_sq - trace / big_batch;
  trace_ = decay_ * trace_ + (1 - decay_) * trace;
  signal_ = decay_ * signal_ + (1 - decay_) * signal;
  ++steps_;
}

std::optional<double> NoiseScale::value(std::int64_t min_steps) const {
  if (steps_ < min_steps || !(signal_ > 0) || !(trace_ > 0)) return std::nullopt;
  return trace_ / signal_;
}

}  // namespace weft
