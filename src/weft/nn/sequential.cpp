#include "weft/nn/sequential.h"

#include <algorithm>

#include "weft/nn/activation.h"
#include "weft/nn/conv.h"

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
    // A ReLU followed by max pooling runs as one pass (the same values and gradients).
    auto* pool = i + 1 < end ? dynamic_cast<MaxPool2d*>(modules_[i + 1].get()) : nullptr;
    const bool fused = pool != nullptr && dynamic_cast<ReLU*>(modules_[i].get()) != nullptr;
    const std::size_t last = fused ? i + 1 : i;
    if (around_)
      for (std::size_t m = i; m <= last; ++m) around_(m, true);
    h = fused ? pool->forward_relu(h) : modules_[i]->forward(h);
    if (around_)
      for (std::size_t m = i; m <= last; ++m) around_(m, false);
    i = last;
  }
  return h;
}

}  // namespace weft
