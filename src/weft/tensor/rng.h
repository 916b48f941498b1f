// Seeded random numbers: xoshiro256** seeded through splitmix64, with Box-Muller normals.
// The whole state (including a cached normal) can be saved and restored exactly, which
// checkpoints need for bitwise-identical resumes.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "weft/tensor/tensor.h"

namespace weft {

struct RngState {
  std::array<std::uint64_t, 4> s{};
  bool has_spare = false;
  double spare = 0.0;
};

class Rng {
 public:
  explicit Rng(std::uint64_t seed = 0);
  std::uint64_t next_u64();
  double uniform();                         // [0, 1)
  double uniform(double lo, double hi);     // [lo, hi)
  double normal(double mean = 0.0, double stddev = 1.0);
  std::uint64_t below(std::uint64_t n);     // uniform integer in [0, n), unbiased
  template <class T>
  void shuffle(std::vector<T>& v) {         // Fisher-Yates
    for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(i)]);
  }
  RngState state() const { return state_; }
  void set_state(const RngState& s) { state_ = s; }

 private:
  RngState state_;
};

// Tensors of random values. randn's values are rng.normal's, in order and bit for bit, and it
// leaves rng as they would (its transforms run on the thread pool).
Tensor randn(const Shape& shape, Rng& rng, double mean = 0.0, double stddev = 1.0,
             DType dtype = DType::F32);
Tensor rand_uniform(const Shape& shape, Rng& rng, double lo, double hi, DType dtype = DType::F32);

}  // namespace weft
