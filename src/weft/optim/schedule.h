// Learning-rate schedules, as a pure function of the step (so a resumed run continues
// the same curve).
//   constant   lr
//   step       lr * gamma^floor(s / step_size)
//   cosine     min_lr + (lr - min_lr) * (1 + cos(pi * s / total)) / 2
// With warmup_steps = W > 0, the first W steps ramp linearly from lr/W to lr, and the
// schedule then runs over the remaining steps.
#pragma once

#include <cstdint>
#include <string>

namespace weft {

struct Schedule {
  std::string kind = "constant";  // constant | step | cosine
  std::int64_t warmup_steps = 0;
  std::int64_t step_size = 1;  // for step
  double gamma = 0.1;          // for step
  std::int64_t total_steps = 1;  // for cosine
  double min_lr = 0.0;           // for cosine
};

// Throws ConfigError for an unknown kind or invalid values.
void validate(const Schedule& schedule);
// The learning rate for step `step` (0-based) given the base rate.
double learning_rate(const Schedule& schedule, double base_lr, std::int64_t step);

}  // namespace weft
