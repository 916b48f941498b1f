#include "weft/nn/module.h"

#include <map>
#include <set>

namespace weft {

Var Module::register_parameter(const std::string& name, Tensor value) {
  params_.emplace_back(name, Var(std::move(value), true));
  return params_.back().second;
}

void Module::register_module(const std::string& name, std::shared_ptr<Module> module) {
  children_.emplace_back(name, std::move(module));
}

void Module::register_rng(const std::string& name, Rng* rng) { rngs_.emplace_back(name, rng); }

void Module::collect_parameters(const std::string& prefix,
                                std::vector<std::pair<std::string, Var>>& out) const {
  for (const auto& [name, v] : params_) out.emplace_back(prefix + name, v);
  for (const auto& [name, child] : children_) child->collect_parameters(prefix + name + ".", out);
}

void Module::collect_rngs(const std::string& prefix, std::vector<std::pair<std::string, Rng*>>& out) {
  for (const auto& [name, r] : rngs_) out.emplace_back(prefix + name, r);
  for (const auto& [name, child] : children_) child->collect_rngs(prefix + name + ".", out);
}

std::vector<std::pair<std::string, Var>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Var>> out;
  collect_parameters("", out);
  return out;
}

std::vector<std::pair<std::string, Rng*>> Module::named_rngs() {
  std::vector<std::pair<std::string, Rng*>> out;
  collect_rngs("", out);
  return out;
}

std::vector<Var> Module::parameters() const {
  std::vector<Var> out;
  for (auto& [name, v] : named_parameters()) out.push_back(v);
  return out;
}

std::int64_t Module::num_parameters() const {
  std::int64_t n = 0;
  for (const auto& v : parameters()) n += v.value().numel();
  return n;
}

StateDict Module::state_dict() const {
  StateDict out;
  for (const auto& [name, v] : named_parameters()) out.emplace_back(name, v.value().clone());
  return out;
}

void Module::load_state_dict(const StateDict& state) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : state) by_name[name] = &t;
  std::set<std::string> used;
  for (auto& [name, v] : named_parameters()) {
    auto it = by_name.find(name);
    if (it == by_name.end()) throw CheckpointError("state dict has no entry for parameter '" + name + "'");
    const Tensor& t = *it->second;
    if (t.shape() != v.shape()) {
      throw CheckpointError("parameter '" + name + "' has shape " + shape_to_string(v.shape()) +
                            " but the state dict holds " + shape_to_string(t.shape()));
    }
    Var p = v;
    p.mutable_value().copy_(t);
    used.insert(name);
  }
  for (const auto& [name, t] : state) {
    if (!used.count(name)) throw CheckpointError("state dict entry '" + name + "' matches no parameter");
  }
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad() {
  for (auto& v : parameters()) v.clear_grad();
}

void Module::write_summary(const std::string& name, int depth, std::string& out) const {
  out += std::string(static_cast<size_t>(depth) * 2, ' ');
  if (!name.empty()) out += "(" + name + ") ";
  out += describe() + "\n";
  for (const auto& [n, child] : children_) child->write_summary(n, depth + 1, out);
}

std::string Module::summary() const {
  std::string out;
  write_summary("", 0, out);
  return out;
}

}  // namespace weft
