// Dropout: in training, zeroes each element with probability p and scales the others by
// 1/(1-p); in evaluation, the identity. Owns its random generator (saved in checkpoints).
#pragma once

#include "weft/nn/module.h"

namespace weft {

class Dropout : public Module {
 public:
  Dropout(double p, std::uint64_t seed);
  Var forward(const Var& x) override;
  std::string describe() const override;

 private:
  double p_;
  Rng rng_;
};

}  // namespace weft
