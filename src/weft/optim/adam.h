// Adam (Kingma & Ba) with bias correction, and AdamW (decoupled weight decay,
// Loshchilov & Hutter):
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   w -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
// Adam adds weight_decay * w to g; AdamW instead first scales w by (1 - lr * weight_decay).
#pragma once

#include "weft/optim/optimizer.h"

namespace weft {

struct AdamOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled = false;  // true: AdamW
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<std::pair<std::string, Var>> params, double lr, AdamOptions options = {});
  std::string name() const override { return options_.decoupled ? "adamw" : "adam"; }
  StateDict state() const override;
  void load_state(const StateDict& state) override;

 private:
  void update_parameter(Tensor& w, const Tensor& g, Tensor* moments) override;
  AdamOptions options_;
};

}  // namespace weft
