// Sequential: applies its modules in order (a ReLU followed by a MaxPool2d as one pass, the
// same values and gradients). Children are named "0", "1", ... so parameter names match a
// PyTorch nn.Sequential of the same layers.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "weft/nn/module.h"

namespace weft {

class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<Module>> modules);
  Sequential& add(std::shared_ptr<Module> module);
  Var forward(const Var& x) override;
  // Modules [begin, end) only (a frozen prefix and the rest, train/task.h).
  Var forward_range(const Var& x, std::size_t begin, std::size_t end);
  std::string describe() const override { return "Sequential"; }
  std::size_t size() const { return modules_.size(); }
  Module& operator[](std::size_t i) { return *modules_.at(i); }
  // Called before (entering) and after each module a forward runs, with its index (the
  // parameters of an offloaded model come into memory for their module: parallel/param_offload.h).
  using Around = std::function<void(std::size_t module, bool entering)>;
  void set_around(Around around) { around_ = std::move(around); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
  Around around_;
};

}  // namespace weft
