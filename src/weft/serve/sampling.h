// Choosing the next token from a row of logits: greedy (temperature 0), or sampled from the
// softmax at a temperature among the top-k most likely tokens and, of those, the smallest
// set whose probability reaches top-p (nucleus sampling). A sampler owns its generator, so
// one request with one seed draws the same tokens whatever else is batched with it.
#pragma once

#include <cstdint>
#include <vector>

#include "weft/tensor/rng.h"

namespace weft::serve {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy
  std::int64_t top_k = 0;    // 0: every token
  double top_p = 1.0;        // (0, 1]
  std::uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options) : o_(options), rng_(options.seed) {}
  std::int32_t next(const float* logits, std::int64_t vocab);

 private:
  SamplingOptions o_;
  Rng rng_;
  std::vector<std::int32_t> order_;
  std::vector<double> weights_;
};

}  // namespace weft::serve
