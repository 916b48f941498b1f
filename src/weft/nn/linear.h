// Linear (fully connected) layer: y = x W^T + b, W [out, in].
#pragma once

#include "weft/nn/init.h"
#include "weft/nn/module.h"

namespace weft {

class Linear : public Module {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, Rng& rng, bool bias = true,
         Init init = Init::kKaimingNormal, DType dtype = DType::F32);
  Var forward(const Var& x) override;
  // relu(forward(x)) as one operation (Sequential uses it for a linear layer followed by a ReLU).
  Var forward_relu(const Var& x);
  std::string describe() const override;
  Var& weight() { return weight_; }
  Var& bias() { return bias_; }

 private:
  std::int64_t in_, out_;
  Var weight_;
  Var bias_;
};

}  // namespace weft
