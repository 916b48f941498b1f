#include "weft/parallel/parallel_linear.h"

#include <algorithm>
#include <chrono>

#include "weft/autograd/functions.h"
#include "weft/parallel/spans.h"

namespace weft::parallel {
namespace {
using Grads = std::vector<Tensor>;
using comm::DataType;
using comm::ReduceOp;
}  // namespace

Var ColumnParallelLinear::forward(const Var& x) const { return linear(tp_copy(x, *group_), weight_, bias_); }

Var RowParallelLinear::forward(const Var& x) const {
  const Var sum = tp_reduce(linear(x, weight_, Var()), *group_);
  return bias_.defined() ? add(sum, bias_) : sum;
}

Var tp_copy(const Var& x, comm::Communicator& group) {
  comm::Communicator* g = &group;
  return record("tp_copy", x.value(), {x}, [g](const Tensor& grad) {
    Tensor c = grad.contiguous().clone();
    const auto t0 = std::chrono::steady_clock::now();
    g->allreduce(c.data<float>(), c.numel(), DataType::kF32, ReduceOp::kSum)->wait();
    record_span("tp all-reduce (backward)", "comm", 1, t0);
    return Grads{c};
  });
}

Var tp_reduce(const Var& x, comm::Communicator& group) {
  Tensor c = x.value().contiguous().clone();
  const auto t0 = std::chrono::steady_clock::now();
  group.allreduce(c.data<float>(), c.numel(), DataType::kF32, ReduceOp::kSum)->wait();
  record_span("tp all-reduce (forward)", "comm", 1, t0);
  return record("tp_reduce", c, {x}, [](const Tensor& grad) { return Grads{grad}; });
}

Var tp_gather_last(const Var& x, comm::Communicator& group) {
  const Tensor xc = x.value().contiguous();
  const std::int64_t n = xc.size(-1), rows = xc.numel() / std::max<std::int64_t>(n, 1), t = group.size();
  Tensor blocks = Tensor::zeros({t, rows, n});
  const auto t0 = std::chrono::steady_clock::now();
  group.allgather(xc.data<float>(), blocks.data<float>(), xc.numel(), DataType::kF32)->wait();
  record_span("tp all-gather (forward)", "comm", 1, t0);
  Shape shape = xc.shape();
  shape.back() = n * t;
  Tensor out = blocks.permute({1, 0, 2}).contiguous().view(shape);
  comm::Communicator* g = &group;
  return record("tp_gather_last", out, {x}, [g, rows, n, t, xs = xc.shape()](const Tensor& grad) {
    // Each rank's columns, summed over the ranks that used them: a reduce-scatter.
    Tensor blocks_grad = grad.contiguous().view({rows, t, n}).permute({1, 0, 2}).contiguous();
    Tensor mine = Tensor::zeros({rows, n});
    const auto started = std::chrono::steady_clock::now();
    g->reduce_scatter(blocks_grad.data<float>(), mine.data<float>(), rows * n, DataType::kF32, ReduceOp::kSum)->wait();
    record_span("tp reduce-scatter (backward)", "comm", 1, started);
    return Grads{mine.view(xs)};
  });
}

}  // namespace weft::parallel
