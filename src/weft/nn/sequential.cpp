#include "weft/nn/sequential.h"

#include <algorithm>

#include "weft/nn/activation.h"
#include "weft/nn/conv.h"
#include "weft/nn/linear.h"

namespace weft {

Sequential::Sequential(std::vector<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) add(std::move(m));
}

Sequential& Sequential::add(std::shared_ptr<Module> module) {
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
  return *this;
}

Var Sequential::forward(const Var& x) { return forward_range(x, 0, modules_.size()); }

Var Sequential::forward_range(const Var& x, std::size_t begin, std::size_t end) {
  Var h = x;
  end = std::min(end, modules_.size());
  for (std::size_t i = begin; i < end; ++i) {
    // A ReLU followed by max pooling, and a linear layer followed by a ReLU, run as one
    // operation each (the same values and gradients, bit for bit).
    Module* next = i + 1 < end ? modules_[i + 1].get() : nullptr;
    auto* pool = dynamic_cast<MaxPool2d*>(next);
    auto* linear = dynamic_cast<Linear*>(modules_[i].get());
    const bool relu_pool = pool != nullptr && dynamic_cast<ReLU*>(modules_[i].get()) != nullptr;
    const bool linear_relu = linear != nullptr && dynamic_cast<ReLU*>(next) != nullptr;
    const std::size_t last = relu_pool || linear_relu ? i + 1 : i;
    if (around_)
      for (std::size_t m = i; m <= last; ++m) around_(m, true);
    h = relu_pool ? pool->forward_relu(h) : linear_relu ? linear->forward_relu(h) : modules_[i]->forward(h);
    if (around_)
      for (std::size_t m = i; m <= last; ++m) around_(m, false);
    i = last;
  }
  return h;
}

}  // namespace weft
