// Reverse-mode automatic differentiation.
//
// A Var holds a tensor value and, once backward() has run, its gradient. Every operation on
// Vars that need gradients records a Node: its inputs and a function from the output's
// gradient to the inputs' gradients. backward() walks the recorded graph (the tape) in
// reverse topological order, accumulates gradients into the leaves (parameters), and then
// frees the graph and the tensors it saved.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "weft/tensor/tensor.h"

namespace weft {

struct VarImpl;

struct Node {
  const char* name = "";
  std::vector<std::shared_ptr<VarImpl>> inputs;
  // Gradients of the inputs, in order, given the output's gradient. An entry may be an
  // undefined Tensor when that input needs no gradient.
  std::function<std::vector<Tensor>(const Tensor& grad_out)> backward;
};

struct VarImpl {
  Tensor value;
  Tensor grad;
  bool requires_grad = false;
  std::shared_ptr<Node> node;  // the operation that produced this value; null for leaves
  // For a leaf: called during backward() once its gradient is final for this pass (every
  // use in the graph has contributed). Data-parallel training starts communication here.
  std::function<void()> on_grad_ready;
};

class Var {
 public:
  Var() = default;
  explicit Var(Tensor value, bool requires_grad = false);

  bool defined() const { return impl_ != nullptr; }
  const Tensor& value() const { return impl_->value; }
  Tensor& mutable_value() { return impl_->value; }  // for in-place parameter updates
  const Tensor& grad() const { return impl_->grad; }
  void set_grad(Tensor g) { impl_->grad = std::move(g); }
  void clear_grad() { impl_->grad = Tensor(); }
  bool requires_grad() const { return impl_ && impl_->requires_grad; }
  void set_requires_grad(bool r) { impl_->requires_grad = r; }
  bool is_leaf() const { return impl_->node == nullptr; }

  const Shape& shape() const { return impl_->value.shape(); }
  std::int64_t size(std::int64_t d) const { return impl_->value.size(d); }
  std::int64_t dim() const { return impl_->value.dim(); }
  DType dtype() const { return impl_->value.dtype(); }
  double item() const { return impl_->value.item(); }

  // Gradients of this (one-element) value with respect to every leaf that requires them.
  void backward();
  void backward(const Tensor& grad_out);
  Var detach() const { return Var(impl_->value, false); }
  // See VarImpl::on_grad_ready (leaves only).
  void set_grad_ready_hook(std::function<void()> hook) { impl_->on_grad_ready = std::move(hook); }

  const std::shared_ptr<VarImpl>& impl() const { return impl_; }

 private:
  std::shared_ptr<VarImpl> impl_;
};

// While alive, operations record nothing (evaluation, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};
bool grad_enabled();

// Turns gradient recording on within a scope (activation recomputation runs a forward
// inside backward).
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

// Activation recomputation (checkpointing, Chen et al. 2016): y = fn(x) without keeping
// fn's intermediate values; backward runs fn(x) again with gradients on and back-propagates
// through it, which also accumulates the gradients of fn's parameters. Memory: fn's input
// instead of all its activations; time: one more forward of fn.
Var checkpoint(const std::function<Var(const Var&)>& fn, const Var& x);

// Wraps an operation's result: records a Node when gradients are enabled and any input
// requires them; otherwise returns a plain value.
Var record(const char* name, Tensor value, const std::vector<Var>& inputs,
           std::function<std::vector<Tensor>(const Tensor& grad_out)> backward);

}  // namespace weft
