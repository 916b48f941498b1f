#include "weft/nn/dropout.h"

#include "weft/autograd/functions.h"

namespace weft {

Dropout::Dropout(double p, std::uint64_t seed) : p_(p), rng_(seed) {
  if (!(p >= 0.0 && p < 1.0)) throw ConfigError("dropout probability must be in [0, 1), got " + std::to_string(p));
  register_rng("rng", &rng_);
}

Var Dropout::forward(const Var& x) {
  if (!is_training()) return x;
  return dropout(x, p_, rng_);
}

std::string Dropout::describe() const { return "Dropout(p=" + std::to_string(p_) + ")"; }

}  // namespace weft
