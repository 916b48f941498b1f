#include "weft/autograd/variable.h"

#include <unordered_map>
#include <unordered_set>

#include "weft/tensor/linalg.h"
#include "weft/tensor/ops.h"

namespace weft {

namespace {
thread_local bool t_grad_enabled = true;

void accumulate(GradMeta& v, const Tensor& g) {
  // A leaf's value may be swapped between steps (sharded parameters); check it against
  // the gradient so far.
  const Shape& want = v.node ? v.shape : (v.grad.defined() ? v.grad.shape() : g.shape());
  WEFT_CHECK(g.shape() == want, "gradient shape " + shape_to_string(g.shape()) + " does not match value " +
                                    shape_to_string(want));
  if (!v.grad.defined()) {
    v.grad = g;
  } else {
    v.grad = ops::add(v.grad, g);
  }
}
}  // namespace

Var::Var(Tensor value, bool requires_grad) : impl_(std::make_shared<VarImpl>()) {
  impl_->meta = std::make_shared<GradMeta>();
  impl_->meta->shape = value.shape();
  impl_->meta->requires_grad = requires_grad;
  impl_->value = std::move(value);
}

NoGradGuard::NoGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = previous_; }
bool grad_enabled() { return t_grad_enabled; }
EnableGradGuard::EnableGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = true; }
EnableGradGuard::~EnableGradGuard() { t_grad_enabled = previous_; }

// Mixed precision is the products' bf16 setting (linalg.h: bf16 instructions where the
// processor has them), which the autograd's rounding and stored activations follow.
Bf16Guard::Bf16Guard(bool on) : previous_(ops::bf16_products()) { ops::set_bf16_products(on); }
Bf16Guard::~Bf16Guard() { ops::set_bf16_products(previous_); }
bool bf16_enabled() { return ops::bf16_products(); }

Tensor gemm_operand(const Tensor& t) { return bf16_enabled() && t.dtype() == DType::F32 ? ops::round_bf16(t) : t; }
Tensor gemm_operand(const Tensor& t, std::int64_t m, std::int64_t n, std::int64_t k) {
  return ops::bf16_instructions_for(m, n, k) ? t : gemm_operand(t);
}

namespace {
// The bf16 copies made most recently, so that an activation two operations keep (a
// softmax's output is also the next product's operand) is stored once. An entry holds its
// source weakly: once the fp32 tensor is gone, so is the entry. No operation writes into an
// activation in place, and backward empties the list before anything (an optimizer step)
// can write into a view of a parameter, so a live source holds the values that were packed.
struct PackedEntry {
  std::weak_ptr<Storage> source;
  std::int64_t offset = 0;
  Shape shape, strides;
  Tensor packed;
};
thread_local std::vector<PackedEntry> t_packed;

void remember_packed(const Tensor& t, const Tensor& packed) {
  std::erase_if(t_packed, [](const PackedEntry& e) { return e.source.expired(); });
  if (t_packed.size() >= 4) t_packed.erase(t_packed.begin());
  t_packed.push_back({t.storage(), t.offset(), t.shape(), t.strides(), packed});
}

Tensor pack_bf16(const Tensor& t) {
  auto same = [&](const PackedEntry& e) {
    return e.source.lock() == t.storage() && e.offset == t.offset() && e.shape == t.shape() && e.strides == t.strides();
  };
  for (const PackedEntry& e : t_packed)
    if (same(e)) return e.packed;
  Tensor packed = t.to(DType::BF16);
  remember_packed(t, packed);
  return packed;
}
}  // namespace

bool keeps_bf16(const Tensor& t) { return bf16_enabled() && t_grad_enabled && t.dtype() == DType::F32; }

SavedTensor SavedTensor::activation(const Tensor& t) {
  SavedTensor s;
  s.shape_ = t.shape();
  s.stored_ = keeps_bf16(t) ? pack_bf16(t) : t;
  return s;
}

SavedTensor SavedTensor::input(const Var& v) {
  if (!v.is_leaf()) return activation(v.value());
  SavedTensor s;
  s.shape_ = v.shape();
  s.leaf_ = v.impl();
  return s;
}

SavedTensor SavedTensor::product_operand(const Var& v) {
  SavedTensor s = input(v);
  if (v.is_leaf()) s.round_on_get_ = bf16_enabled() && v.dtype() == DType::F32;
  return s;
}

const Tensor& SavedTensor::leaf_value() const {
  const Tensor& v = leaf_->value;
  WEFT_CHECK(v.shape() == shape_, "backward read a parameter whose storage was dropped (shape " +
                                      shape_to_string(v.shape()) + ", was " + shape_to_string(shape_) +
                                      "): gather it before backward reaches its operation");
  return v;
}

Tensor SavedTensor::get() const {
  if (leaf_) return round_on_get_ ? ops::round_bf16(leaf_value()) : leaf_value();
  if (stored_.dtype() == DType::BF16) return stored_.to(DType::F32);
  return stored_;
}

Tensor SavedTensor::get_bf16() const {
  if (leaf_) return leaf_value().to(DType::BF16);
  return stored_.dtype() == DType::BF16 ? stored_ : stored_.to(DType::BF16);
}

void remember_bf16_copy(const Tensor& source, const Tensor& packed) {
  WEFT_CHECK(packed.dtype() == DType::BF16 && packed.shape() == source.shape(), "remember_bf16_copy: not a bf16 copy");
  if (t_grad_enabled) remember_packed(source, packed);
}

Tensor bf16_operand(const Var& v) {
  const Tensor& t = v.value();
  if (t.dtype() != DType::F32) return t.to(DType::BF16);
  return !v.is_leaf() && t_grad_enabled ? pack_bf16(t) : t.to(DType::BF16);
}

Var checkpoint(const std::function<Var(const Var&)>& fn, const Var& x) {
  if (!t_grad_enabled) return fn(x);
  Tensor y;
  {
    NoGradGuard no_grad;
    y = fn(Var(x.value())).value();
  }
  Tensor input = x.value();
  SavedTensor saved = SavedTensor::input(x);
  const bool bf16 = bf16_enabled();
  const DType dtype = x.dtype();
  // The node must exist even when x needs no gradient: fn's parameters do.
  Var x_for_record = x.requires_grad() ? x : Var(input, false);
  auto backward = [fn, saved, bf16, dtype](const Tensor& grad_out) {
    EnableGradGuard grad_on;
    Bf16Guard precision(bf16);  // recompute with the forward pass's numerics
    Var x_again(saved.get(), true);
    Var y_again = fn(x_again);
    y_again.backward(grad_out);
    return std::vector<Tensor>{x_again.grad().defined() ? x_again.grad() : Tensor::zeros(saved.shape(), dtype)};
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
    for (const auto& in : inputs) node->inputs.push_back(in.impl()->meta);
    node->backward = std::move(backward);
    out.impl()->meta->node = std::move(node);
  }
  return out;
}

void Var::backward() {
  WEFT_CHECK(impl_->value.numel() == 1, "backward() without a gradient needs a one-element value");
  backward(Tensor::ones(impl_->value.shape(), impl_->value.dtype()));
}

void Var::backward(const Tensor& grad_out) {
  WEFT_CHECK(impl_->meta->requires_grad, "backward() on a value that does not require gradients");
  t_packed.clear();  // see PackedEntry
  // Topological order by an iterative depth-first search (graphs of long sequences are deep).
  // `order` owns its entries: freeing a node below must not free a place still to visit.
  std::vector<std::shared_ptr<GradMeta>> order;
  std::unordered_set<GradMeta*> visited;
  std::unordered_map<GradMeta*, int> leaf_uses;  // edges into each leaf still to be processed
  std::vector<std::pair<std::shared_ptr<GradMeta>, size_t>> stack{{impl_->meta, 0}};
  visited.insert(impl_->meta.get());
  while (!stack.empty()) {
    auto& top = stack.back();
    const std::shared_ptr<GradMeta>& v = top.first;
    if (v->node && top.second < v->node->inputs.size()) {
      std::shared_ptr<GradMeta> in = v->node->inputs[top.second++];
      if (in->requires_grad && !in->node) ++leaf_uses[in.get()];
      if (in->requires_grad && visited.insert(in.get()).second) stack.emplace_back(std::move(in), 0);
    } else {
      order.push_back(v);
      stack.pop_back();
    }
  }
  accumulate(*impl_->meta, grad_out);
  auto used = [&](GradMeta* in) {  // one use of a leaf is done; is its gradient final?
    if (in->node || !in->requires_grad) return;
    if (--leaf_uses[in] == 0 && in->on_grad_ready) in->on_grad_ready();
  };
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    GradMeta* v = it->get();
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
      GradMeta* in = node->inputs[i].get();
      if (in->requires_grad && grads[i].defined()) accumulate(*in, grads[i]);
      used(in);
    }
  }
}

}  // namespace weft
