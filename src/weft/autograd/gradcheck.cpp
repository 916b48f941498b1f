#include "weft/autograd/gradcheck.h"

#include <cmath>

#include "weft/autograd/functions.h"
#include "weft/tensor/ops.h"
#include "weft/tensor/rng.h"

namespace weft {

GradcheckResult gradcheck(const std::function<Var(const std::vector<Var>&)>& f,
                          const std::vector<Tensor>& inputs, double eps, double atol, double rtol) {
  for (const auto& t : inputs) WEFT_CHECK(t.dtype() == DType::F64, "gradcheck needs f64 inputs");
  std::vector<Tensor> values;
  for (const auto& t : inputs) values.push_back(t.clone());

  // Analytic gradients of L = sum(f(x) * R).
  std::vector<Var> vars;
  for (const auto& t : values) vars.emplace_back(t, true);
  Var y = f(vars);
  Rng rng(12345);
  Tensor r = randn(y.shape(), rng, 0.0, 1.0, DType::F64);
  Var loss = sum(mul(y, Var(r)));
  loss.backward();

  auto scalar_loss = [&](const std::vector<Tensor>& xs) {
    NoGradGuard guard;
    std::vector<Var> vs;
    for (const auto& t : xs) vs.emplace_back(t, false);
    return ops::sum(ops::mul(f(vs).value(), r)).item();
  };

  GradcheckResult result;
  for (size_t k = 0; k < values.size(); ++k) {
    Tensor analytic = vars[k].grad().defined() ? vars[k].grad().contiguous()
                                               : Tensor::zeros(values[k].shape(), DType::F64);
    Tensor& x = values[k];
    double* px = x.data<double>();
    const double* pa = analytic.data<double>();
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      double saved = px[i];
      px[i] = saved + eps;
      double up = scalar_loss(values);
      px[i] = saved - eps;
      double down = scalar_loss(values);
      px[i] = saved;
      double numeric = (up - down) / (2 * eps);
      double err = std::fabs(numeric - pa[i]);
      result.max_abs_error = std::max(result.max_abs_error, err);
      if (!(err <= atol + rtol * std::fabs(numeric)) && result.ok) {
        result.ok = false;
        result.message = "input " + std::to_string(k) + " element " + std::to_string(i) + ": analytic " +
                         std::to_string(pa[i]) + " vs numeric " + std::to_string(numeric);
      }
    }
  }
  return result;
}

}  // namespace weft
