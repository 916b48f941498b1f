#include "weft/nn/init.h"

#include <cmath>

namespace weft {

namespace {
std::int64_t receptive_field(const Shape& s) {
  std::int64_t r = 1;
  for (size_t i = 2; i < s.size(); ++i) r *= s[i];
  return r;
}
}  // namespace

std::int64_t fan_in(const Shape& s) {
  WEFT_CHECK(s.size() >= 2, "fan_in needs a weight with at least 2 dims");
  return s[1] * receptive_field(s);
}

std::int64_t fan_out(const Shape& s) {
  WEFT_CHECK(s.size() >= 2, "fan_out needs a weight with at least 2 dims");
  return s[0] * receptive_field(s);
}

void kaiming_normal_(Tensor& w, Rng& rng) {
  double stddev = std::sqrt(2.0 / static_cast<double>(fan_in(w.shape())));
  w.copy_(randn(w.shape(), rng, 0.0, stddev, w.dtype()));
}

void xavier_uniform_(Tensor& w, Rng& rng) {
  double fi = static_cast<double>(fan_in(w.shape())), fo = static_cast<double>(fan_out(w.shape()));
  double bound = std::sqrt(6.0 / (fi + fo));  // variance bound^2 / 3 = 2 / (fi + fo)
  w.copy_(rand_uniform(w.shape(), rng, -bound, bound, w.dtype()));
}

void xavier_normal_(Tensor& w, Rng& rng) {
  double fi = static_cast<double>(fan_in(w.shape())), fo = static_cast<double>(fan_out(w.shape()));
  w.copy_(randn(w.shape(), rng, 0.0, std::sqrt(2.0 / (fi + fo)), w.dtype()));
}

namespace {
thread_local bool skip_initialization = false;
}  // namespace

SkipInitialization::SkipInitialization() : previous_(skip_initialization) { skip_initialization = true; }
SkipInitialization::~SkipInitialization() { skip_initialization = previous_; }
bool initialization_skipped() { return skip_initialization; }

void init_(Tensor& w, Init init, Rng& rng) {
  if (skip_initialization) {
    w.zero_();
    return;
  }
  switch (init) {
    case Init::kKaimingNormal: kaiming_normal_(w, rng); break;
    case Init::kXavierUniform: xavier_uniform_(w, rng); break;
    case Init::kXavierNormal: xavier_normal_(w, rng); break;
  }
}

}  // namespace weft
