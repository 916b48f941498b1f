#include "weft/nn/sequential.h"

namespace weft {

Sequential::Sequential(std::vector<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) add(std::move(m));
}

Sequential& Sequential::add(std::shared_ptr<Module> module) {
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
  return *this;
}

Var Sequential::forward(const Var& x) {
  Var h = x;
  for (auto& m : modules_) h = m->forward(h);
  return h;
}

}  // namespace weft
