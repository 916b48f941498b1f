// Stochastic gradient descent with momentum and weight decay (PyTorch's formulation):
//   d = grad + weight_decay * w;  buf = momentum * buf + d;  w -= lr * buf
// With momentum 0 this is plain SGD, w -= lr * grad.
#pragma once

#include "weft/optim/optimizer.h"

namespace weft {

class SGD : public Optimizer {
 public:
  SGD(std::vector<std::pair<std::string, Var>> params, double lr, double momentum = 0.0,
      double weight_decay = 0.0);
  std::string name() const override { return "sgd"; }
  StateDict state() const override;
  void load_state(const StateDict& state) override;

 private:
  void update_parameter(Tensor& w, const Tensor& g, Tensor* buffers) override;
  double momentum_, weight_decay_;
};

}  // namespace weft
