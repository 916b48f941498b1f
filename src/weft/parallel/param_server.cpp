#include "weft/parallel/param_server.h"

#include <algorithm>

#include "weft/algo/program.h"
#include "weft/parallel/ddp.h"
#include "weft/tensor/ops.h"

namespace weft::parallel {

using Clock = std::chrono::steady_clock;

ShardLayout::ShardLayout(const Module& model, int servers) {
  for (const auto& p : model.parameters()) total += p.value().numel();
  for (int s = 0; s <= servers; ++s) bounds.push_back(algo::block_begin(total, servers, s));
}

namespace {
// Copies between the parameters (or their gradients) and one flat tensor.
void flatten(const std::vector<Var>& params, Tensor& flat, bool gradients) {
  std::int64_t at = 0;
  for (const auto& p : params) {
    std::int64_t n = p.value().numel();
    Tensor dst = flat.slice(0, at, at + n).view(p.shape());
    if (!gradients) dst.copy_(p.value());
    else if (p.grad().defined()) dst.copy_(p.grad());
    else dst.zero_();
    at += n;
  }
}
void unflatten(const Tensor& flat, std::vector<Var>& params) {
  std::int64_t at = 0;
  for (auto& p : params) {
    std::int64_t n = p.value().numel();
    p.mutable_value().copy_(flat.slice(0, at, at + n).view(p.shape()));
    at += n;
  }
}
}  // namespace

ParameterServerWorker::ParameterServerWorker(Module& model, std::shared_ptr<comm::Communicator> comm, int workers,
                                             int servers)
    : model_(model), comm_(std::move(comm)), workers_(workers), servers_(servers), layout_(model, servers) {
  params_ = model.parameters();
  DType t = params_.front().dtype();
  weights_ = Tensor::zeros({layout_.total}, t);
  grads_ = Tensor::zeros({layout_.total}, t);
}

void ParameterServerWorker::pull() {
  auto start = Clock::now();
  const std::size_t es = dtype_size(weights_.dtype());
  std::vector<comm::WorkPtr> recvs;
  for (int s = 0; s < servers_; ++s) {
    recvs.push_back(comm_->irecv(static_cast<std::uint8_t*>(weights_.raw_data()) + layout_.bounds[s] * es,
                                 layout_.size(s), comm_dtype(weights_), workers_ + s));
  }
  for (auto& w : recvs) w->wait();
  for (auto& w : pending_) w->wait();
  pending_.clear();
  comm_seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
  unflatten(weights_, params_);
}

void ParameterServerWorker::push() {
  flatten(params_, grads_, true);
  const std::size_t es = dtype_size(grads_.dtype());
  for (int s = 0; s < servers_; ++s) {
    pending_.push_back(comm_->isend(static_cast<std::uint8_t*>(grads_.raw_data()) + layout_.bounds[s] * es,
                                    layout_.size(s), comm_dtype(grads_), workers_ + s));
  }
}

ServerReport run_parameter_server(Module& model, std::shared_ptr<comm::Communicator> comm, int workers, int servers,
                                  int server, std::int64_t steps,
                                  const std::function<std::unique_ptr<Optimizer>(std::vector<std::pair<std::string, Var>>)>&
                                      make_optimizer,
                                  const std::function<double(std::int64_t)>& lr_at) {
  auto start = Clock::now();
  ShardLayout layout(model, servers);
  std::vector<Var> params = model.parameters();
  DType t = params.front().dtype();
  Tensor all = Tensor::zeros({layout.total}, t);
  flatten(params, all, false);
  const std::int64_t n = layout.size(server);
  Var shard(all.slice(0, layout.bounds[server], layout.bounds[server + 1]).clone(), true);
  auto optimizer = make_optimizer({{"shard" + std::to_string(server), shard}});
  std::vector<Tensor> incoming;
  for (int w = 0; w < workers; ++w) incoming.push_back(Tensor::zeros({n}, t));
  ServerReport r;
  auto serve_weights = [&](std::vector<comm::WorkPtr>& works) {
    for (int w = 0; w < workers; ++w) works.push_back(comm->isend(shard.value().raw_data(), n, comm_dtype(shard.value()), w));
  };
  for (std::int64_t step = 0; step < steps; ++step) {
    auto c0 = Clock::now();
    std::vector<comm::WorkPtr> works;
    serve_weights(works);  // pull (fan-out)
    for (int w = 0; w < workers; ++w) {  // push (fan-in)
      works.push_back(comm->irecv(incoming[static_cast<size_t>(w)].raw_data(), n, comm_dtype(shard.value()), w));
    }
    for (auto& wk : works) wk->wait();
    r.comm_seconds += std::chrono::duration<double>(Clock::now() - c0).count();
    // Average in worker order, then one optimizer step on the shard.
    Tensor sum = incoming[0].clone();
    for (int w = 1; w < workers; ++w) ops::add_(sum, incoming[static_cast<size_t>(w)]);
    ops::mul_(sum, 1.0 / workers);
    shard.set_grad(sum);
    optimizer->set_lr(lr_at(step));
    optimizer->step();
    ++r.steps;
  }
  std::vector<comm::WorkPtr> last;
  serve_weights(last);
  for (auto& wk : last) wk->wait();
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

double measure_link(comm::Communicator& job, int workers, bool is_worker0, std::int64_t elements) {
  std::vector<std::int32_t> buf(static_cast<size_t>(std::max<std::int64_t>(elements, 1)));
  const int peer = is_worker0 ? workers : 0;
  std::vector<double> times;
  for (int i = 0; i < 5; ++i) {
    auto t0 = Clock::now();
    if (is_worker0) {
      job.isend(buf.data(), elements, comm::DataType::kI32, peer)->wait();
      job.irecv(buf.data(), elements, comm::DataType::kI32, peer)->wait();
    } else {
      job.irecv(buf.data(), elements, comm::DataType::kI32, peer)->wait();
      job.isend(buf.data(), elements, comm::DataType::kI32, peer)->wait();
    }
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / 2);
  }
  std::sort(times.begin(), times.end());
  return is_worker0 ? static_cast<double>(elements) * 4 / times[2] : 0.0;
}

double ps_cost_model_seconds(int workers, int servers, double gradient_bytes, double weight_bytes,
                             double bytes_per_second) {
  return workers * gradient_bytes / (servers * bytes_per_second) + workers * weight_bytes / (servers * bytes_per_second);
}

}  // namespace weft::parallel
