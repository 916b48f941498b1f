#include "weft/optim/optimizer.h"

#include <cmath>
#include <map>

#include "weft/tensor/ops.h"
#include "weft/tensor/profile.h"

namespace weft {

Optimizer::Optimizer(std::vector<std::pair<std::string, Var>> params, double lr)
    : params_(std::move(params)), lr_(lr) {
  if (!(lr > 0.0)) throw ConfigError("learning rate must be positive, got " + std::to_string(lr));
}

void Optimizer::step() {
  begin_updates({});
  for (std::size_t k = 0; k < params_.size(); ++k) update(k);
  end_updates();
}

void Optimizer::begin_updates(std::vector<std::size_t> order) {
  ++steps_;
  store_->begin_pass(std::move(order));
}

void Optimizer::update(std::size_t k) {
  ProfileScope profile(Work::Optimizer);
  Var& p = params_.at(k).second;
  if (!p.grad().defined()) return;
  Tensor* buffers = buffer_names_.empty() ? nullptr : store_->acquire(k);
  Tensor g = p.grad().contiguous();
  Tensor& w = p.mutable_value();
  WEFT_CHECK(w.is_contiguous(), name() + " needs contiguous parameters");
  update_parameter(w, g, buffers);
  if (buffers) store_->release(k);
}

void Optimizer::end_updates() { store_->end_pass(); }

void Optimizer::zero_grad() {
  for (auto& [name, p] : params_) p.clear_grad();
}

void Optimizer::make_buffers(std::vector<std::string> names) {
  std::vector<Tensor> like;
  for (const auto& [name, p] : params_) like.push_back(p.value());
  store_ = std::make_unique<StateStore>(like, static_cast<int>(names.size()));
  buffer_names_ = std::move(names);
}

StateDict Optimizer::export_buffers() const {
  StateDict out;
  for (std::size_t j = 0; j < buffer_names_.size(); ++j)
    for (size_t i = 0; i < params_.size(); ++i)
      out.emplace_back(buffer_names_[j] + "." + params_[i].first, store_->read(i, static_cast<int>(j)));
  return out;
}

void Optimizer::import_buffers(const StateDict& state) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : state) by_name[name] = &t;
  for (std::size_t j = 0; j < buffer_names_.size(); ++j) {
    for (size_t i = 0; i < params_.size(); ++i) {
      std::string key = buffer_names_[j] + "." + params_[i].first;
      auto it = by_name.find(key);
      if (it == by_name.end()) throw CheckpointError("optimizer state has no entry '" + key + "'");
      if (it->second->shape() != store_->shape(i)) {  // (the parameter's: its value may be offloaded)
        throw CheckpointError("optimizer state '" + key + "' has shape " + shape_to_string(it->second->shape()) +
                              ", expected " + shape_to_string(store_->shape(i)));
      }
      store_->write(i, static_cast<int>(j), *it->second);
    }
  }
}

double clip_grad_norm(const std::vector<Var>& params, double max_norm) {
  double sq = 0;
  for (const Var& p : params)
    if (p.grad().defined()) sq += ops::sum_of_squares(p.grad());
  const double norm = std::sqrt(sq);
  if (max_norm > 0 && norm > max_norm) {
    const double scale = max_norm / (norm + 1e-6);
    for (const Var& p : params) {
      if (!p.grad().defined()) continue;
      Var q = p;
      q.set_grad(ops::mul(p.grad(), scale));
    }
  }
  return norm;
}

}  // namespace weft
