#include "weft/tensor/rng.h"

#include <cmath>

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

double Rng::normal(double mean, double stddev) {
  if (state_.has_spare) {
    state_.has_spare = false;
    return mean + stddev * state_.spare;
  }
  double u1 = 0.0;
  while (u1 <= 0.0) u1 = uniform();
  double u2 = uniform();
  double r = std::sqrt(-2.0 * std::log(u1));
  double theta = 2.0 * M_PI * u2;
  state_.spare = r * std::sin(theta);
  state_.has_spare = true;
  return mean + stddev * r * std::cos(theta);
}

std::uint64_t Rng::below(std::uint64_t n) {
  if (n <= 1) return 0;
  std::uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  std::uint64_t x;
  do x = next_u64();
  while (x >= limit);
  return x % n;
}

Tensor randn(const Shape& shape, Rng& rng, double mean, double stddev, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    T* p = t.data<T>();
    for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(rng.normal(mean, stddev));
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
