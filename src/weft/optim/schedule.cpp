#include "weft/optim/schedule.h"

#include <algorithm>
#include <cmath>

#include "weft/util/error.h"

namespace weft {

void validate(const Schedule& s) {
  if (s.kind != "constant" && s.kind != "step" && s.kind != "cosine") {
    throw ConfigError("unknown learning-rate schedule '" + s.kind + "' (known: constant, step, cosine)");
  }
  if (s.warmup_steps < 0) throw ConfigError("warm-up steps must be >= 0");
  if (s.kind == "step" && s.step_size < 1) throw ConfigError("step schedule needs a step size >= 1");
  if (s.kind == "step" && !(s.gamma > 0 && std::isfinite(s.gamma))) {
    throw ConfigError("the step schedule needs a finite decay factor > 0");
  }
  if (s.kind == "cosine" && !(s.min_lr >= 0 && std::isfinite(s.min_lr))) {
    throw ConfigError("the cosine schedule needs a finite final rate >= 0");
  }
  if (s.kind == "cosine" && s.total_steps < 1) throw ConfigError("cosine schedule needs total steps >= 1");
}

double learning_rate(const Schedule& s, double base_lr, std::int64_t step) {
  if (step < s.warmup_steps) {
    return base_lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  }
  std::int64_t t = step - s.warmup_steps;
  if (s.kind == "step") return base_lr * std::pow(s.gamma, static_cast<double>(t / s.step_size));
  if (s.kind == "cosine") {
    std::int64_t total = std::max<std::int64_t>(1, s.total_steps - s.warmup_steps);
    double frac = std::min(1.0, static_cast<double>(t) / static_cast<double>(total));
    return s.min_lr + (base_lr - s.min_lr) * 0.5 * (1.0 + std::cos(M_PI * frac));
  }
  return base_lr;
}

}  // namespace weft
