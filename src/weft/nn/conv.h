// Convolutional layers: Conv2d (stride, padding), MaxPool2d, Flatten. NCHW layout.
#pragma once

#include "weft/nn/init.h"
#include "weft/nn/module.h"

namespace weft {

class Conv2d : public Module {
 public:
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel, Rng& rng,
         std::int64_t stride = 1, std::int64_t padding = 0, bool bias = true,
         Init init = Init::kKaimingNormal, DType dtype = DType::F32);
  Var forward(const Var& x) override;
  std::string describe() const override;
  Var& weight() { return weight_; }
  Var& bias() { return bias_; }

 private:
  std::int64_t in_, out_, kernel_, stride_, padding_;
  Var weight_;
  Var bias_;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(std::int64_t kernel, std::int64_t stride = 0);  // stride 0 = kernel
  Var forward(const Var& x) override;
  // forward(relu(x)) in one pass (Sequential uses it for a ReLU followed by this pooling).
  Var forward_relu(const Var& x);
  std::string describe() const override;

 private:
  std::int64_t kernel_, stride_;
};

// [N, d1, d2, ...] -> [N, d1*d2*...]
class Flatten : public Module {
 public:
  Var forward(const Var& x) override;
  std::string describe() const override { return "Flatten"; }
};

}  // namespace weft
