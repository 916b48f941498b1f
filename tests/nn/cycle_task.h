// A task every language model here should learn quickly: 4 sequences of 12 tokens counting
// up modulo 6 (row b starts at b), next-token cross-entropy, 150 Adam steps.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "weft/autograd/functions.h"
#include "weft/nn/language_model.h"
#include "weft/optim/adam.h"

namespace weft::testing {

// Trains `lm` (vocabulary 6, context >= 12) on the task; returns the first and last loss.
inline std::pair<double, double> train_on_cycle(LanguageModel& lm, double lr) {
  Adam opt(lm.named_parameters(), lr);
  Tensor ids = Tensor::empty({4, 12});
  std::vector<std::int32_t> targets;
  for (std::int64_t b = 0; b < 4; ++b)
    for (std::int64_t t = 0; t < 12; ++t) {
      ids.set({b, t}, static_cast<double>((b + t) % 6));
      targets.push_back(static_cast<std::int32_t>((b + t + 1) % 6));
    }
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    opt.zero_grad();
    Var loss = cross_entropy(reshape(lm.forward(Var(ids)), {48, 6}), targets);
    loss.backward();
    opt.step();
    if (step == 0) first = loss.item();
    last = loss.item();
  }
  return {first, last};
}

}  // namespace weft::testing
