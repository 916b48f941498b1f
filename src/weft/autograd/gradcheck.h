// Finite-difference gradient checker, in double precision.
//
// gradcheck(f, inputs) compares the gradients backward() computes for
// L = sum(f(inputs) * R), R a fixed random tensor, with central differences
// (L(x + eps) - L(x - eps)) / (2 eps) for every element of every input.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "weft/autograd/variable.h"

namespace weft {

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0.0;
  std::string message;  // the first mismatch, when !ok
};

GradcheckResult gradcheck(const std::function<Var(const std::vector<Var>&)>& f,
                          const std::vector<Tensor>& inputs, double eps = 1e-6, double atol = 1e-6,
                          double rtol = 1e-4);

}  // namespace weft
