// Activation layers, each applying the autograd function of the same name.
#pragma once

#include "weft/nn/module.h"

namespace weft {

class ReLU : public Module {
 public:
  Var forward(const Var& x) override;
  std::string describe() const override { return "ReLU"; }
};

class Sigmoid : public Module {
 public:
  Var forward(const Var& x) override;
  std::string describe() const override { return "Sigmoid"; }
};

class Tanh : public Module {
 public:
  Var forward(const Var& x) override;
  std::string describe() const override { return "Tanh"; }
};

// Over the last dimension.
class Softmax : public Module {
 public:
  Var forward(const Var& x) override;
  std::string describe() const override { return "Softmax"; }
};

class LogSoftmax : public Module {
 public:
  Var forward(const Var& x) override;
  std::string describe() const override { return "LogSoftmax"; }
};

}  // namespace weft
