// weft's communicator as a torch.distributed backend: a c10d::ProcessGroup whose
// collectives and point-to-point messages run on weft (shared memory on one host, TCP
// across), registered as backend "weft" by the weft_torch package (__init__.py), so that
// init_process_group("weft") and DistributedDataParallel work unchanged.
//
// - Rendezvous through PyTorch's own store (the one init_process_group built from env://,
//   tcp:// or file://): rank 0 of each group serves weft's store on a free port and
//   publishes where, the others look it up (Communicator's ExternalRendezvous).
// - Tensors: contiguous CPU tensors of float32/64, float16, bfloat16, int8/32/64, uint8 and
//   bool (bool only moved, or reduced with max/min); one tensor per call (a single device).
// - An operation runs on the thread that waits for it (a blocking call costs no thread
//   switch), or, once its future is asked for or is_completed() polled, on the
//   communicator's thread while Python goes on (DDP's overlap: it asks each bucket's
//   future). The future completes when the operation finishes, list outputs filled first.
//   Point-to-point messages issued back to back run as one exchange (weft's rule), so a
//   batch of isend/irecv cannot deadlock. Tags must follow the order of the messages
//   between two ranks (weft keeps that order).
// - Reductions: sum, avg, product, min, max (bitwise and/or/xor and premultiplied sum are
//   refused by name).
// (The tensor, its two operators and the pybind11 casters, not torch/extension.h: the whole
// C++ API took 37 s of the 2-core build's compile time, these 20.)
#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <pybind11/chrono.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "weft/comm/communicator.h"
#include "weft/comm/process.h"

namespace {

using weft::comm::DataType;
using weft::comm::ReduceOp;
using weft::comm::WorkPtr;

DataType data_type(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return DataType::kF32;
    case at::kDouble: return DataType::kF64;
    case at::kHalf: return DataType::kF16;
    case at::kBFloat16: return DataType::kBF16;
    case at::kInt: return DataType::kI32;
    case at::kLong: return DataType::kI64;
    case at::kChar: return DataType::kI8;
    case at::kByte: case at::kBool: return DataType::kU8;
    default: TORCH_CHECK(false, "weft backend: tensors of ", t.scalar_type(), " are not supported");
  }
}

ReduceOp reduce_op(const c10d::ReduceOp& op, const at::Tensor& t) {
  const bool boolean = t.scalar_type() == at::kBool;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: if (!boolean) return ReduceOp::kSum; break;
    case c10d::ReduceOp::AVG: if (!boolean) return ReduceOp::kAvg; break;
    case c10d::ReduceOp::PRODUCT: if (!boolean) return ReduceOp::kProd; break;
    case c10d::ReduceOp::MIN: return ReduceOp::kMin;
    case c10d::ReduceOp::MAX: return ReduceOp::kMax;
    default: break;
  }
  TORCH_CHECK(false, "weft backend: this reduction is not supported",
              boolean ? " on bool tensors (max and min are)" : " (sum, avg, product, min and max are)");
}

const at::Tensor& checked(const at::Tensor& t) {
  TORCH_CHECK(t.device().is_cpu(), "weft backend: tensors must be on the CPU");
  TORCH_CHECK(t.is_contiguous(), "weft backend: tensors must be contiguous");
  return t;
}

const at::Tensor& single(const std::vector<at::Tensor>& tensors) {
  TORCH_CHECK(tensors.size() == 1, "weft backend: one tensor per call (got ", tensors.size(), ")");
  return checked(tensors[0]);
}

// `t` holds `like`'s element type: a buffer of one read as the other would be misread.
const at::Tensor& same_type(const at::Tensor& t, const at::Tensor& like) {
  TORCH_CHECK(t.scalar_type() == like.scalar_type(), "weft backend: tensors of ", t.scalar_type(), " and ",
              like.scalar_type(), " in one call");
  return checked(t);
}

// Every tensor of a list is a contiguous CPU tensor of `like`'s type with `numel` elements
// (the flat buffer the operation runs on assumes it).
void check_parts(const std::vector<at::Tensor>& parts, const at::Tensor& like, int64_t numel, const char* what) {
  for (const auto& p : parts) {
    same_type(p, like);
    TORCH_CHECK(p.numel() == numel, "weft backend: ", what, " tensors of ", p.numel(), " elements where the call needs ",
                numel);
  }
}

// Copies `parts` into one new contiguous tensor laid out back to back.
at::Tensor flattened(const std::vector<at::Tensor>& parts) {
  std::vector<at::Tensor> flat;
  for (const auto& p : parts) flat.push_back(p.reshape({-1}));
  return at::cat(flat);
}

// What the operations of one torch Work complete: shared with the callbacks, so that it
// outlives the Work (DDP keeps only the future).
struct Completion {
  std::vector<at::Tensor> outputs;
  std::vector<at::Tensor> keep;  // tensors the operations read that must live until they end
  std::function<void()> then;    // fills list outputs from a flat buffer
  c10::intrusive_ptr<c10::ivalue::Future> future =
      c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  std::atomic<int> pending{0};
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;

  void one_finished(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (e && !error) error = e;
    }
    if (--pending == 0) finish();
  }
  void finish() {
    std::exception_ptr e;
    {
      std::lock_guard<std::mutex> lock(mu);
      e = error;
    }
    if (!e && then) {
      try {
        then();
      } catch (...) {
        e = std::current_exception();
      }
    }
    keep.clear();
    {
      std::lock_guard<std::mutex> lock(mu);
      error = e;
      done = true;
    }
    cv.notify_all();
    if (e) {
      future->setError(e);
    } else {
      future->markCompleted(c10::IValue(outputs));
    }
  }
};

// One torch Work for one or more weft operations: finishes when all of them have, after
// `then` has run, and completes its future with the outputs.
class WeftWork : public c10d::Work {
 public:
  WeftWork(int rank, c10d::OpType type, std::vector<WorkPtr> ops, std::shared_ptr<Completion> c)
      : c10d::Work(rank, type), ops_(std::move(ops)), c_(std::move(c)) {
    c_->pending = static_cast<int>(ops_.size());
    if (ops_.empty()) c_->finish();
    for (auto& op : ops_) op->on_finish([c = c_](std::exception_ptr error) { c->one_finished(error); });
  }

  bool isCompleted() override {
    start();
    std::lock_guard<std::mutex> lock(c_->mu);
    return c_->done;
  }
  bool isSuccess() const override {
    std::lock_guard<std::mutex> lock(c_->mu);
    return c_->done && !c_->error;
  }
  std::exception_ptr exception() const override {
    std::lock_guard<std::mutex> lock(c_->mu);
    return c_->error;
  }
  // (PyTorch's binding releases the GIL around it.)
  bool wait(std::chrono::milliseconds) override {
    for (auto& op : ops_) {
      try {
        op->wait();  // runs it on this thread unless the communicator's thread already does
      } catch (...) {  // the completion holds the error
      }
    }
    std::unique_lock<std::mutex> lock(c_->mu);
    c_->cv.wait(lock, [&] { return c_->done; });
    if (c_->error) std::rethrow_exception(c_->error);
    return true;
  }
  std::vector<at::Tensor> result() override { return c_->outputs; }
  void synchronize() override {}
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    start();
    return c_->future;
  }

 private:
  void start() {
    if (started_.exchange(true)) return;
    for (auto& op : ops_) op->start();
  }

  std::vector<WorkPtr> ops_;
  std::shared_ptr<Completion> c_;
  std::atomic<bool> started_{false};
};

class ProcessGroupWeft : public c10d::ProcessGroup {
 public:
  ProcessGroupWeft(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::duration<float> timeout)
      : c10d::ProcessGroup(rank, size) {
    weft::comm::ProcessInfo info = weft::comm::process_info_from_env();
    info.rank = rank;  // this group's, not the job's
    info.world = size;
    weft::comm::CommOptions options = weft::comm::CommOptions::from_env();
    const double seconds = timeout.count();
    if (seconds > 0) options.timeout_s = options.rendezvous_timeout_s = seconds;
    const std::string key = "weft/store";
    weft::comm::ExternalRendezvous via{
        [&](const std::string& value) { store->set(key, std::vector<uint8_t>(value.begin(), value.end())); },
        [&] {
          const std::vector<uint8_t> v = store->get(key);  // waits up to the store's timeout
          return std::string(v.begin(), v.end());
        }};
    pybind11::gil_scoped_release release;  // the rendezvous waits for the other ranks
    comm_ = weft::comm::Communicator::init(info, options, via);
  }

  const std::string getBackendName() const override { return "weft"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override {
    const at::Tensor& t = single(tensors);
    return collective(c10d::OpType::BROADCAST, {comm_->broadcast(t.data_ptr(), t.numel(), data_type(t), root(opts.rootRank))},
                      tensors);
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override {
    const at::Tensor& t = single(tensors);
    return collective(c10d::OpType::ALLREDUCE,
                      {comm_->allreduce(t.data_ptr(), t.numel(), data_type(t), reduce_op(opts.reduceOp, t))}, tensors);
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    std::vector<WorkPtr> ops;
    for (const auto& t : tensors) {
      checked(t);
      ops.push_back(comm_->allreduce(t.data_ptr(), t.numel(), data_type(t), reduce_op(opts.reduceOp, t)));
    }
    return collective(c10d::OpType::ALLREDUCE_COALESCED, std::move(ops), tensors);
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    const at::Tensor& t = single(tensors);
    return collective(c10d::OpType::REDUCE,
                      {comm_->reduce(t.data_ptr(), t.data_ptr(), t.numel(), data_type(t), reduce_op(opts.reduceOp, t),
                                     root(opts.rootRank))},
                      tensors);
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions&) override {
    const at::Tensor& in = single(inputs);
    TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                "weft backend: all_gather needs a list of ", getSize(), " output tensors");
    check_parts(outputs[0], in, in.numel(), "all_gather's output");
    at::Tensor flat = at::empty({getSize() * in.numel()}, in.options());
    auto out = outputs[0];
    return collective(c10d::OpType::ALLGATHER,
                      {comm_->allgather(in.data_ptr(), flat.data_ptr(), in.numel(), data_type(in))}, out,
                      [flat, out, n = in.numel()]() mutable { unpack(flat, out, n); });
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions&) override {
    same_type(output, checked(input));
    TORCH_CHECK(output.numel() == input.numel() * getSize(), "weft backend: the output must hold world_size inputs");
    return collective(c10d::OpType::_ALLGATHER_BASE,
                      {comm_->allgather(input.data_ptr(), output.data_ptr(), input.numel(), data_type(input))}, {output});
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    const at::Tensor& in = single(inputs);
    const int r = root(opts.rootRank);
    const bool is_root = getRank() == r;
    TORCH_CHECK(!is_root || (outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize()),
                "weft backend: gather needs a list of ", getSize(), " output tensors on the root");
    if (is_root) check_parts(outputs[0], in, in.numel(), "gather's output");
    at::Tensor flat = is_root ? at::empty({getSize() * in.numel()}, in.options()) : at::empty({0}, in.options());
    std::vector<at::Tensor> out = is_root ? outputs[0] : std::vector<at::Tensor>{};
    return collective(c10d::OpType::GATHER, {comm_->gather(in.data_ptr(), flat.data_ptr(), in.numel(), data_type(in), r)},
                      out, [flat, out, n = in.numel()]() mutable { unpack(flat, out, n); });
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    const at::Tensor& out = single(outputs);
    const int r = root(opts.rootRank);
    const bool is_root = getRank() == r;
    TORCH_CHECK(!is_root || (inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize()),
                "weft backend: scatter needs a list of ", getSize(), " input tensors on the root");
    if (is_root) check_parts(inputs[0], out, out.numel(), "scatter's input");
    at::Tensor flat = is_root ? flattened(inputs[0]) : at::empty({0}, out.options());
    return collective(c10d::OpType::SCATTER,
                      {comm_->scatter(flat.data_ptr(), out.data_ptr(), out.numel(), data_type(out), r)}, outputs, {},
                      {flat});
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    const at::Tensor& out = single(outputs);
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                "weft backend: reduce_scatter needs a list of ", getSize(), " input tensors");
    check_parts(inputs[0], out, out.numel(), "reduce_scatter's input");
    at::Tensor flat = flattened(inputs[0]);
    return collective(c10d::OpType::REDUCE_SCATTER,
                      {comm_->reduce_scatter(flat.data_ptr(), out.data_ptr(), out.numel(), data_type(out),
                                             reduce_op(opts.reduceOp, out))},
                      outputs, {}, {flat});
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    same_type(output, checked(input));
    TORCH_CHECK(input.numel() == output.numel() * getSize(), "weft backend: the input must hold world_size outputs");
    return collective(c10d::OpType::_REDUCE_SCATTER_BASE,
                      {comm_->reduce_scatter(input.data_ptr(), output.data_ptr(), output.numel(), data_type(output),
                                             reduce_op(opts.reduceOp, output))},
                      {output});
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits, const c10d::AllToAllOptions&) override {
    same_type(output, checked(input));
    const int w = getSize();
    if (output_splits.empty() && input_splits.empty()) {
      TORCH_CHECK(input.numel() % w == 0 && output.numel() == input.numel(),
                  "weft backend: all_to_all_single needs equal tensors divisible by world_size");
      return collective(c10d::OpType::ALLTOALL_BASE,
                        {comm_->alltoall(input.data_ptr(), output.data_ptr(), input.numel() / w, data_type(input))},
                        {output});
    }
    // Uneven splits (rows of the first dimension): one message to and from each peer.
    const int64_t row = input.dim() > 0 && input.size(0) > 0 ? input.numel() / input.size(0) : 1;
    auto offsets = [&](const std::vector<int64_t>& splits, const at::Tensor& t) {
      std::vector<int64_t> at_rows(static_cast<size_t>(w) + 1, 0);
      TORCH_CHECK(splits.empty() || static_cast<int>(splits.size()) == w, "weft backend: splits need world_size entries");
      for (int j = 0; j < w; ++j) {
        const int64_t rows = splits.empty() ? (t.dim() > 0 ? t.size(0) / w : 0) : splits[static_cast<size_t>(j)];
        TORCH_CHECK(rows >= 0 && rows <= t.numel(), "weft backend: split ", rows, " is outside 0..", t.numel());
        at_rows[j + 1] = at_rows[j] + rows;
      }
      TORCH_CHECK(at_rows[w] * row == t.numel(), "weft backend: the splits do not add up to the tensor");
      return at_rows;
    };
    const auto in_at = offsets(input_splits, input), out_at = offsets(output_splits, output);
    return exchange(c10d::OpType::ALLTOALL_BASE, input, output, in_at, out_at, row);
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions&) override {
    const int w = getSize();
    TORCH_CHECK(static_cast<int>(inputs.size()) == w && static_cast<int>(outputs.size()) == w,
                "weft backend: all_to_all needs world_size input and output tensors");
    std::vector<WorkPtr> ops;
    const int me = getRank();
    for (int j = 0; j < w; ++j) {
      same_type(inputs[j], inputs[0]);
      same_type(outputs[j], inputs[0]);
      if (j == me) continue;
      ops.push_back(comm_->isend(inputs[j].data_ptr(), inputs[j].numel(), data_type(inputs[j]), j));
      ops.push_back(comm_->irecv(outputs[j].data_ptr(), outputs[j].numel(), data_type(outputs[j]), j));
    }
    outputs[me].copy_(inputs[me]);
    return collective(c10d::OpType::ALLTOALL, std::move(ops), outputs, {}, inputs);
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int /*tag*/) override {
    const at::Tensor& t = single(tensors);
    return point_to_point(c10d::OpType::SEND, comm_->isend(t.data_ptr(), t.numel(), data_type(t), peer(dst)), tensors);
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int /*tag*/) override {
    const at::Tensor& t = single(tensors);
    return point_to_point(c10d::OpType::RECV, comm_->irecv(t.data_ptr(), t.numel(), data_type(t), peer(src)), tensors);
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>&, int) override {
    TORCH_CHECK(false, "weft backend: recv without a source is not supported (name the sending rank)");
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    return collective(c10d::OpType::BARRIER, {comm_->barrier()}, {});
  }

 private:
  int root(int64_t r) const {
    TORCH_CHECK(r >= 0 && r < getSize(), "weft backend: root ", r, " is outside 0..", getSize() - 1);
    return static_cast<int>(r);
  }
  int peer(int p) const {
    TORCH_CHECK(p >= 0 && p < getSize() && p != getRank(), "weft backend: peer ", p, " is not another rank of the group");
    return p;
  }
  static void unpack(const at::Tensor& flat, std::vector<at::Tensor>& out, int64_t n) {
    for (size_t i = 0; i < out.size(); ++i) out[i].copy_(flat.narrow(0, static_cast<int64_t>(i) * n, n).view_as(out[i]));
  }

  // `keep`: tensors the operations read that must live until they finish.
  c10::intrusive_ptr<c10d::Work> collective(c10d::OpType type, std::vector<WorkPtr> ops, std::vector<at::Tensor> outputs,
                                            std::function<void()> then = {}, std::vector<at::Tensor> keep = {}) {
    auto c = std::make_shared<Completion>();
    c->outputs = std::move(outputs);
    c->then = std::move(then);
    c->keep = std::move(keep);
    return c10::make_intrusive<WeftWork>(getRank(), type, std::move(ops), std::move(c));
  }
  c10::intrusive_ptr<c10d::Work> point_to_point(c10d::OpType type, WorkPtr op, std::vector<at::Tensor> tensors) {
    auto c = std::make_shared<Completion>();
    c->outputs = std::move(tensors);
    return c10::make_intrusive<WeftWork>(getRank(), type, std::vector<WorkPtr>{std::move(op)}, std::move(c));
  }
  c10::intrusive_ptr<c10d::Work> exchange(c10d::OpType type, const at::Tensor& input, at::Tensor& output,
                                          const std::vector<int64_t>& in_at, const std::vector<int64_t>& out_at,
                                          int64_t row) {
    const int me = getRank();
    const auto es = static_cast<int64_t>(input.element_size());
    auto* in = static_cast<const char*>(input.data_ptr());
    auto* out = static_cast<char*>(output.data_ptr());
    std::vector<WorkPtr> ops;
    for (int j = 0; j < getSize(); ++j) {
      const int64_t send_n = (in_at[j + 1] - in_at[j]) * row, recv_n = (out_at[j + 1] - out_at[j]) * row;
      if (j == me) {
        TORCH_CHECK(send_n == recv_n, "weft backend: this rank's own split differs between input and output");
        std::memcpy(out + out_at[j] * row * es, in + in_at[j] * row * es, static_cast<size_t>(send_n * es));
        continue;
      }
      ops.push_back(comm_->isend(in + in_at[j] * row * es, send_n, data_type(input), j));
      ops.push_back(comm_->irecv(out + out_at[j] * row * es, recv_n, data_type(output), j));
    }
    return collective(type, std::move(ops), {output}, {}, {input});
  }

  std::shared_ptr<weft::comm::Communicator> comm_;
};

c10::intrusive_ptr<c10d::ProcessGroup> create_process_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                            int size, const std::chrono::duration<float>& timeout) {
  return c10::make_intrusive<ProcessGroupWeft>(store, rank, size, timeout);
}

}  // namespace

PYBIND11_MODULE(_weft_torch, m) {
  m.doc() = "weft's communicator as a torch.distributed backend (see weft_torch)";
  m.def("create_process_group", &create_process_group, "the creator function register_backend takes",
        pybind11::arg("store"), pybind11::arg("rank"), pybind11::arg("size"), pybind11::arg("timeout"));
}
