#include "weft/autograd/variable.h"

#include <unordered_map>
#include <unordered_set>

#include "weft/tensor/ops.h"

namespace weft {

namespace {
thread_local bool t_grad_enabled = true;

void accumulate(VarImpl& v, const Tensor& g) {
  WEFT_CHECK(g.shape() == v.value.shape(), "gradient shape " + shape_to_string(g.shape()) +
                                               " does not match value " + shape_to_string(v.value.shape()));
  if (!v.grad.defined()) {
    v.grad = g;
  } else {
    v.grad = ops::add(v.grad, g);
  }
}
}  // namespace

Var::Var(Tensor value, bool requires_grad) : impl_(std::make_shared<VarImpl>()) {
  impl_->value = std::move(value);
  impl_->requires_grad = requires_grad;
}

NoGradGuard::NoGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = previous_; }
bool grad_enabled() { return t_grad_enabled; }
EnableGradGuard::EnableGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = true; }
EnableGradGuard::~EnableGradGuard() { t_grad_enabled = previous_; }

Var checkpoint(const std::function<Var(const Var&)>& fn, const Var& x) {
  if (!t_grad_enabled) return fn(x);
  Tensor y;
  {
    NoGradGuard no_grad;
    y = fn(Var(x.value())).value();
  }
  Tensor input = x.value();
  // The node must exist even when x needs no gradient: fn's parameters do.
  Var x_for_record = x.requires_grad() ? x : Var(input, false);
  auto backward = [fn, input](const Tensor& grad_out) {
    EnableGradGuard grad_on;
    Var x_again(input, true);
    Var y_again = fn(x_again);
    y_again.backward(grad_out);
    return std::vector<Tensor>{x_again.grad().defined() ? x_again.grad() : Tensor::zeros(input.shape(), input.dtype())};
  };
  Var out = record("checkpoint", y, {x_for_record}, backward);
  if (!out.requires_grad()) {
    // record() made no node (x needs no gradient); make one so that backward reaches fn's
    // parameters.
    Var leaf(input, true);
    out = record("checkpoint", y, {leaf}, backward);
  }
  return out;
}

Var record(const char* name, Tensor value, const std::vector<Var>& inputs,
           std::function<std::vector<Tensor>(const Tensor& grad_out)> backward) {
  bool needs = false;
  if (t_grad_enabled) {
    for (const auto& in : inputs) needs = needs || in.requires_grad();
  }
  Var out(std::move(value), needs);
  if (needs) {
    auto node = std::make_shared<Node>();
    node->name = name;
    for (const auto& in : inputs) node->inputs.push_back(in.impl());
    node->backward = std::move(backward);
    out.impl()->node = std::move(node);
  }
  return out;
}

void Var::backward() {
  WEFT_CHECK(impl_->value.numel() == 1, "backward() without a gradient needs a one-element value");
  backward(Tensor::ones(impl_->value.shape(), impl_->value.dtype()));
}

void Var::backward(const Tensor& grad_out) {
  WEFT_CHECK(impl_->requires_grad, "backward() on a value that does not require gradients");
  // Topological order by an iterative depth-first search (graphs of long sequences are deep).
  // `order` owns its entries: freeing a node below must not free a value still to visit.
  std::vector<std::shared_ptr<VarImpl>> order;
  std::unordered_set<VarImpl*> visited;
  std::unordered_map<VarImpl*, int> leaf_uses;  // edges into each leaf still to be processed
  std::vector<std::pair<std::shared_ptr<VarImpl>, size_t>> stack{{impl_, 0}};
  visited.insert(impl_.get());
  while (!stack.empty()) {
    auto& top = stack.back();
    const std::shared_ptr<VarImpl>& v = top.first;
    if (v->node && top.second < v->node->inputs.size()) {
      std::shared_ptr<VarImpl> in = v->node->inputs[top.second++];
      if (in->requires_grad && !in->node) ++leaf_uses[in.get()];
      if (in->requires_grad && visited.insert(in.get()).second) stack.emplace_back(std::move(in), 0);
    } else {
      order.push_back(v);
      stack.pop_back();
    }
  }
  accumulate(*impl_, grad_out);
  auto used = [&](VarImpl* in) {  // one use of a leaf is done; is its gradient final?
    if (in->node || !in->requires_grad) return;
    if (--leaf_uses[in] == 0 && in->on_grad_ready) in->on_grad_ready();
  };
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    VarImpl* v = it->get();
    if (!v->node) continue;  // a leaf: its gradient stays
    std::shared_ptr<Node> node = std::move(v->node);
    Tensor g = std::move(v->grad);
    v->grad = Tensor();
    if (!g.defined()) {
      for (auto& in : node->inputs) used(in.get());
      continue;
    }
    std::vector<Tensor> grads = node->backward(g);
    WEFT_CHECK(grads.size() == node->inputs.size(), std::string(node->name) + ": wrong number of gradients");
    for (size_t i = 0; i < grads.size(); ++i) {
      VarImpl* in = node->inputs[i].get();
      if (in->requires_grad && grads[i].defined()) accumulate(*in, grads[i]);
      used(in);
    }
  }
}

}  // namespace weft
