#include "weft/tensor/rng.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "weft/tensor/thread_pool.h"

namespace weft {

namespace {
std::uint64_t splitmix64(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Rng::Rng(std::uint64_t seed) {
  std::uint64_t x = seed;
  for (auto& w : state_.s) w = splitmix64(x);
}

std::uint64_t Rng::next_u64() {
  auto& s = state_.s;
  std::uint64_t result = rotl(s[1] * 5, 7) * 9;
  std::uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Rng::uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

namespace {
// Box-Muller's two uniforms, in the generator's order (the first never 0).
std::pair<double, double> box_muller_uniforms(Rng& rng) {
  double u1 = 0.0;
  while (u1 <= 0.0) u1 = rng.uniform();
  return {u1, rng.uniform()};
}
// The pair's normals: the first scaled, the second (the spare) not yet.
void box_muller(double u1, double u2, double mean, double stddev, double& first, double& spare) {
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 2.0 * M_PI * u2;
  spare = r * std::sin(theta);
  first = mean + stddev * r * std::cos(theta);
}
}  // namespace

double Rng::normal(double mean, double stddev) {
  if (state_.has_spare) {
    state_.has_spare = false;
    return mean + stddev * state_.spare;
  }
  const auto [u1, u2] = box_muller_uniforms(*this);
  double first = 0.0;
  box_muller(u1, u2, mean, stddev, first, state_.spare);
  state_.has_spare = true;
  return first;
}

std::uint64_t Rng::below(std::uint64_t n) {
  if (n <= 1) return 0;
  std::uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  std::uint64_t x;
  do x = next_u64();
  while (x >= limit);
  return x % n;
}

namespace {
// rng.normal(mean, stddev) n times into p, bit for bit, the generator left as they leave it.
// The logarithm, square root, sine and cosine are most of a normal's cost: each chunk's
// uniforms are drawn in the generator's order, then its pairs transformed on the pool (the
// same function as Rng::normal's, so the same values whatever the thread count).
template <class T>
void fill_normal(T* p, std::int64_t n, Rng& rng, double mean, double stddev) {
  std::int64_t i = 0;
  if (n > 0 && rng.state().has_spare) p[i++] = static_cast<T>(rng.normal(mean, stddev));
  constexpr std::int64_t kChunkPairs = std::int64_t{1} << 15;
  std::vector<std::pair<double, double>> uniforms;
  while (n - i >= 2) {
    const std::int64_t pairs = std::min(kChunkPairs, (n - i) / 2);
    uniforms.resize(static_cast<std::size_t>(pairs));
    for (auto& u : uniforms) u = box_muller_uniforms(rng);
    T* out = p + i;
    parallel_for(pairs, 2048, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t k = begin; k < end; ++k) {
        double first = 0.0, spare = 0.0;
        box_muller(uniforms[k].first, uniforms[k].second, mean, stddev, first, spare);
        out[2 * k] = static_cast<T>(first);
        out[2 * k + 1] = static_cast<T>(mean + stddev * spare);
      }
    });
    i += 2 * pairs;
  }
  if (i < n) p[i] = static_cast<T>(rng.normal(mean, stddev));  // (its pair's spare kept, as one by one)
}
}  // namespace

Tensor randn(const Shape& shape, Rng& rng, double mean, double stddev, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    fill_normal(t.data<T>(), t.numel(), rng, mean, stddev);
  });
  return t;
}

Tensor rand_uniform(const Shape& shape, Rng& rng, double lo, double hi, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    T* p = t.data<T>();
    for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(rng.uniform(lo, hi));
  });
  return t;
}

}  // namespace weft
