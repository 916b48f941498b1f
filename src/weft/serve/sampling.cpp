#include "weft/serve/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace weft::serve {

std::int32_t Sampler::next(const float* logits, std::int64_t vocab) {
  if (o_.temperature <= 0) return static_cast<std::int32_t>(std::max_element(logits, logits + vocab) - logits);
  order_.resize(static_cast<std::size_t>(vocab));
  std::iota(order_.begin(), order_.end(), 0);
  const std::size_t k = o_.top_k > 0 ? std::min<std::size_t>(order_.size(), static_cast<std::size_t>(o_.top_k))
                                     : order_.size();
  // The k most likely, most likely first (ties: the lower id), as the greedy choice breaks them.
  auto more_likely = [&](std::int32_t a, std::int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k), order_.end(), more_likely);
  const double top = logits[order_[0]];
  weights_.resize(k);
  double total = 0;
  for (std::size_t i = 0; i < k; ++i) total += weights_[i] = std::exp((logits[order_[i]] - top) / o_.temperature);
  // Nucleus: the shortest prefix whose probability reaches top_p.
  std::size_t keep = k;
  if (o_.top_p < 1) {
    double mass = 0;
    for (keep = 0; keep < k;) {
      mass += weights_[keep++];
      if (mass >= o_.top_p * total) break;
    }
    total = mass;
  }
  double u = rng_.uniform() * total;
  std::size_t pick = 0;
  while (pick + 1 < keep && u >= weights_[pick]) u -= weights_[pick++];
  return order_[pick];
}

}  // namespace weft::serve
