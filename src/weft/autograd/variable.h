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

struct GradMeta;

struct Node {
  const char* name = "";
  // The inputs' places in the graph. The graph holds no values: an activation lives only as
  // long as a Var handle or a backward function that saved it (see SavedTensor).
  std::vector<std::shared_ptr<GradMeta>> inputs;
  // Gradients of the inputs, in order, given the output's gradient. An entry may be an
  // undefined Tensor when that input needs no gradient.
  std::function<std::vector<Tensor>(const Tensor& grad_out)> backward;
};

// A value's place in the graph: its gradient and the operation that produced it.
struct GradMeta {
  Tensor grad;
  bool requires_grad = false;
  Shape shape;                 // the value's shape, for checking gradients
  std::shared_ptr<Node> node;  // the operation that produced this value; null for leaves
  // For a leaf: called during backward() once its gradient is final for this pass (every
  // use in the graph has contributed). Data-parallel training starts communication here.
  std::function<void()> on_grad_ready;
};

struct VarImpl {
  Tensor value;
  std::shared_ptr<GradMeta> meta;
};

class Var {
 public:
  Var() = default;
  explicit Var(Tensor value, bool requires_grad = false);

  bool defined() const { return impl_ != nullptr; }
  const Tensor& value() const { return impl_->value; }
  Tensor& mutable_value() { return impl_->value; }  // for in-place parameter updates
  const Tensor& grad() const { return impl_->meta->grad; }
  void set_grad(Tensor g) { impl_->meta->grad = std::move(g); }
  void clear_grad() { impl_->meta->grad = Tensor(); }
  bool requires_grad() const { return impl_ && impl_->meta->requires_grad; }
  void set_requires_grad(bool r) { impl_->meta->requires_grad = r; }
  bool is_leaf() const { return impl_->meta->node == nullptr; }

  const Shape& shape() const { return impl_->value.shape(); }
  std::int64_t size(std::int64_t d) const { return impl_->value.size(d); }
  std::int64_t dim() const { return impl_->value.dim(); }
  DType dtype() const { return impl_->value.dtype(); }
  double item() const { return impl_->value.item(); }

  // Gradients of this (one-element) value with respect to every leaf that requires them.
  void backward();
  void backward(const Tensor& grad_out);
  Var detach() const { return Var(impl_->value, false); }
  // See GradMeta::on_grad_ready (leaves only).
  void set_grad_ready_hook(std::function<void()> hook) { impl_->meta->on_grad_ready = std::move(hook); }

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

// Mixed precision: bf16 storage, fp32 compute, fp32 master weights. While a Bf16Guard(true)
// is alive on a thread, the matrix products (linear, matmul) read their operands rounded to
// bfloat16 and accumulate in fp32 (the numerics of a bf16 matrix unit), and every activation
// an operation keeps for backward is stored in bf16, half the bytes. Parameters, gradients
// and optimizer state stay fp32: the parameters are the master weights the optimizer
// updates; their bf16 copies are made when a product reads them.
class Bf16Guard {
 public:
  explicit Bf16Guard(bool on);
  ~Bf16Guard();
  Bf16Guard(const Bf16Guard&) = delete;
  Bf16Guard& operator=(const Bf16Guard&) = delete;

 private:
  bool previous_;
};
bool bf16_enabled();

// A tensor an operation keeps for its backward function. get() returns the value the
// forward pass used, widened to fp32 if it was stored in bf16.
class SavedTensor {
 public:
  SavedTensor() = default;
  Tensor get() const;
  // The value as bf16 (a product's operand on bf16 instructions): the stored bf16 copy as
  // it is, else rounded now (the same bits get() would widen).
  Tensor get_bf16() const;
  // Whether the value is kept as a bf16 copy (an activation under mixed precision): then
  // get_bf16() reads it without a conversion, for kernels that widen as they read.
  bool stored_bf16() const { return !leaf_ && stored_.defined() && stored_.dtype() == DType::BF16; }
  const Shape& shape() const { return shape_; }

  // An activation (an operation's output or intermediate): stored in bf16 under mixed
  // precision while gradients are recorded, else kept as is.
  static SavedTensor activation(const Tensor& t);
  // An operation's input: an activation unless it is a leaf (a parameter or input data,
  // which lives anyway: kept by reference to the Var, whose value get() reads then, so that
  // sharded training may drop a parameter's storage between forward and backward).
  static SavedTensor input(const Var& v);
  // An operand of a matrix product. Under mixed precision the forward pass used
  // gemm_operand(v); a leaf is kept by reference and rounded again by get().
  static SavedTensor product_operand(const Var& v);

 private:
  const Tensor& leaf_value() const;  // the parameter's value, checked against its shape when saved

  Tensor stored_;
  std::shared_ptr<VarImpl> leaf_;
  Shape shape_;
  bool round_on_get_ = false;
};
// Whether an activation `t` is kept as a bf16 copy (mixed precision, gradients recorded,
// float32): what SavedTensor::activation does, for kernels that make the copy themselves.
bool keeps_bf16(const Tensor& t);
// Under mixed precision: `packed` is the bf16 copy of `source` that a kernel rounded while
// it produced or read `source`; SavedTensor::activation and bf16_operand of `source` take it
// instead of converting again (while `source` lives and until backward).
void remember_bf16_copy(const Tensor& source, const Tensor& packed);
// A product's operand as a bf16 tensor for bf16 instructions: an activation's stored copy
// (packed once, shared with the SavedTensor that keeps it), else rounded now.
Tensor bf16_operand(const Var& v);
// The value a matrix product reads: rounded to bf16 under mixed precision, else as is.
Tensor gemm_operand(const Tensor& t);
// The same for a product [m, k] x [k, n]: as is when it will run on bf16 instructions,
// which round their operands themselves (the same bits, one pass fewer).
Tensor gemm_operand(const Tensor& t, std::int64_t m, std::int64_t n, std::int64_t k);

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
