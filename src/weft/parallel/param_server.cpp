#include <nlohmann/json.hpp>

#include "weft/parallel/param_server.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>

#include "weft/algo/program.h"
#include "weft/parallel/ddp.h"
#include "weft/tensor/ops.h"
#include "weft/util/error.h"

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

namespace {
// Asynchronous mode: two communicators per (worker, server) pair, one carrying weights and
// one gradients (so that a posted receive never holds up a send in the same batch), created
// in (worker, server) order by both sides. In each pair the worker is rank 0, the server 1.
struct Pair {
  std::shared_ptr<comm::Communicator> weights, grads;
};
std::vector<Pair> make_pairs(comm::Communicator& job, int workers, int servers) {
  std::vector<Pair> pairs;
  const int me = job.rank();
  for (int w = 0; w < workers; ++w)
    for (int s = 0; s < servers; ++s)
      if (me == w || me == workers + s) {
        Pair p;
        p.weights = job.new_group({w, workers + s});
        p.grads = job.new_group({w, workers + s});
        pairs.push_back(p);
      }
  return pairs;
}
}  // namespace

ParameterServerWorker::ParameterServerWorker(Module& model, std::shared_ptr<comm::Communicator> comm, int workers,
                                             int servers, int staleness)
    : model_(model), comm_(std::move(comm)), workers_(workers), servers_(servers), layout_(model, servers) {
  if (staleness >= 0)
    for (auto& p : make_pairs(*comm_, workers, servers)) {
      pairs_.push_back(p.weights);
      grad_pairs_.push_back(p.grads);
    }
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
    void* at = static_cast<std::uint8_t*>(weights_.raw_data()) + layout_.bounds[s] * es;
    recvs.push_back(pairs_.empty() ? comm_->irecv(at, layout_.size(s), comm_dtype(weights_), workers_ + s)
                                   : pairs_[static_cast<std::size_t>(s)]->irecv(at, layout_.size(s), comm_dtype(weights_), 1));
  }
  for (auto& w : recvs) w->wait();
  for (auto& w : pending_) w->wait();
  pending_.clear();
  comm_seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
  unflatten(weights_, params_);
}

StateDict ParameterServerWorker::receive_checkpoint(const std::vector<std::string>& buffers) {
  for (auto& w : pending_) w->wait();
  pending_.clear();
  const std::size_t es = dtype_size(weights_.dtype());
  Tensor w = Tensor::zeros({layout_.total}, weights_.dtype());
  std::vector<Tensor> flat(buffers.size());
  for (auto& f : flat) f = Tensor::zeros({layout_.total}, weights_.dtype());
  for (int s = 0; s < servers_; ++s) {
    const std::int64_t off = layout_.bounds[s], n = layout_.size(s);
    comm_->irecv(static_cast<std::uint8_t*>(w.raw_data()) + off * es, n, comm_dtype(w), workers_ + s)->wait();
    for (auto& f : flat) comm_->irecv(static_cast<std::uint8_t*>(f.raw_data()) + off * es, n, comm_dtype(f), workers_ + s)->wait();
  }
  unflatten(w, params_);
  StateDict out;
  auto named = model_.named_parameters();
  for (std::size_t b = 0; b < buffers.size(); ++b) {
    const std::string prefix = buffers[b].substr(0, buffers[b].rfind('.'));
    std::int64_t at = 0;
    for (const auto& [name, p] : named) {
      const std::int64_t k = p.value().numel();
      out.emplace_back(prefix + "." + name, flat[b].slice(0, at, at + k).view(p.shape()).clone());
      at += k;
    }
  }
  return out;
}

void ParameterServerWorker::push() {
  flatten(params_, grads_, true);
  const std::size_t es = dtype_size(grads_.dtype());
  for (int s = 0; s < servers_; ++s) {
    const void* at = static_cast<std::uint8_t*>(grads_.raw_data()) + layout_.bounds[s] * es;
    pending_.push_back(pairs_.empty() ? comm_->isend(at, layout_.size(s), comm_dtype(grads_), workers_ + s)
                                      : grad_pairs_[static_cast<std::size_t>(s)]->isend(at, layout_.size(s), comm_dtype(grads_), 1));
    pending_.back()->test();  // start it now: the server may be waiting for it while this worker does other things
  }
}

ServerReport run_parameter_server(Module& model, std::shared_ptr<comm::Communicator> comm, int workers, int servers,
                                  int server, std::int64_t steps,
                                  const std::function<std::unique_ptr<Optimizer>(std::vector<std::pair<std::string, Var>>)>&
                                      make_optimizer,
                                  const std::function<double(std::int64_t)>& lr_at, int staleness,
                                  std::int64_t first_step, const StateDict* resume_state,
                                  const ServerCheckpoints& checkpoints) {
  auto start = Clock::now();
  ShardLayout layout(model, servers);
  std::vector<Var> params = model.parameters();
  DType t = params.front().dtype();
  Tensor all = Tensor::zeros({layout.total}, t);
  flatten(params, all, false);
  const std::int64_t n = layout.size(server);
  Var shard(all.slice(0, layout.bounds[server], layout.bounds[server + 1]).clone(), true);
  auto optimizer = make_optimizer({{"shard" + std::to_string(server), shard}});
  if (resume_state) {
    // This server's shard of each consolidated buffer ("exp_avg.<parameter>" ...).
    std::map<std::string, const Tensor*> by_name;
    for (const auto& [name, tensor] : *resume_state) by_name[name] = &tensor;
    auto named = model.named_parameters();
    StateDict mine;
    for (const auto& [key, buffer] : optimizer->state()) {
      const std::string prefix = key.substr(0, key.rfind('.'));
      Tensor full = Tensor::zeros({layout.total}, t);
      std::int64_t at = 0;
      for (const auto& [name, p] : named) {
        const std::int64_t k = p.value().numel();
        auto it = by_name.find(prefix + "." + name);
        if (it == by_name.end()) throw CheckpointError("optimizer state has no entry '" + prefix + "." + name + "'");
        full.slice(0, at, at + k).view(p.shape()).copy_(*it->second);
        at += k;
      }
      mine.emplace_back(key, full.slice(0, layout.bounds[server], layout.bounds[server + 1]).clone());
    }
    optimizer->load_state(mine);
    optimizer->set_steps(first_step);
  }
  // A checkpoint for worker 0: the shard's weights, then each optimizer buffer.
  auto send_checkpoint = [&] {
    comm->isend(shard.value().raw_data(), n, comm_dtype(shard.value()), 0)->wait();
    for (const auto& [key, buffer] : optimizer->state()) {
      Tensor b = buffer.contiguous();
      comm->isend(b.raw_data(), n, comm_dtype(b), 0)->wait();
    }
  };
  std::vector<Tensor> incoming;
  for (int w = 0; w < workers; ++w) incoming.push_back(Tensor::zeros({n}, t));
  ServerReport r;
  if (staleness >= 0) {
    // Asynchronous: serve whichever worker has pushed, within the staleness bound.
    auto pairs = make_pairs(*comm, workers, servers);
    const comm::DataType dt = comm_dtype(shard.value());
    std::vector<std::int64_t> clock(static_cast<std::size_t>(workers), 0);
    std::vector<comm::WorkPtr> recv(static_cast<std::size_t>(workers)), sends;
    std::vector<Tensor> sent;  // the weights each answer carried, alive until it is delivered
    std::vector<bool> owed(static_cast<std::size_t>(workers), false);
    auto answer = [&](int w) {
      sent.push_back(shard.value().clone());
      sends.push_back(pairs[static_cast<std::size_t>(w)].weights->isend(sent.back().raw_data(), n, dt, 0));
      sends.back()->test();
    };
    // The loop sleeps until a worker's gradients arrive: each receive, once started, counts
    // its arrival here (instead of the loop polling the receives).
    struct Arrivals {
      std::mutex mu;
      std::condition_variable cv;
      std::uint64_t count = 0;
    };
    auto arrivals = std::make_shared<Arrivals>();
    auto post_receive = [&](int w) {
      comm::WorkPtr& rw = recv[static_cast<std::size_t>(w)];
      rw = pairs[static_cast<std::size_t>(w)].grads->irecv(incoming[static_cast<std::size_t>(w)].raw_data(), n, dt, 0);
      rw->test();  // started: it progresses on the communicator's thread
      rw->on_finish([arrivals](const std::exception_ptr&) {
        {
          std::lock_guard<std::mutex> lock(arrivals->mu);
          ++arrivals->count;
        }
        arrivals->cv.notify_all();
      });
    };
    for (int w = 0; w < workers; ++w) {
      answer(w);  // the initial weights
      if (steps > 0) post_receive(w);
    }
    std::int64_t remaining = steps * workers;
    while (remaining > 0) {
      bool progress = false;
      std::uint64_t arrived_before;
      {
        std::lock_guard<std::mutex> lock(arrivals->mu);
        arrived_before = arrivals->count;
      }
      for (int w = 0; w < workers; ++w) {
        auto& rw = recv[static_cast<std::size_t>(w)];
        if (!rw || !rw->test()) continue;
        // Staleness 0 answers nobody before every gradient of the step is in: the gradients
        // are applied in worker order, so that the rounding never follows the arrival order.
        const std::int64_t mine = clock[static_cast<std::size_t>(w)];
        if (staleness == 0 &&
            std::any_of(clock.begin(), clock.begin() + w, [mine](std::int64_t c) { return c <= mine; }))
          continue;
        rw->wait();  // rethrows a failure
        progress = true;
        Tensor g = incoming[static_cast<std::size_t>(w)].clone();
        ops::mul_(g, 1.0 / workers);
        shard.set_grad(g);
        optimizer->set_lr(lr_at(clock[static_cast<std::size_t>(w)]));
        optimizer->step();
        ++r.updates;
        --remaining;
        if (++clock[static_cast<std::size_t>(w)] < steps) {
          owed[static_cast<std::size_t>(w)] = true;
          post_receive(w);
        } else {
          rw.reset();
        }
      }
      const std::int64_t slowest = *std::min_element(clock.begin(), clock.end());
      for (int w = 0; w < workers; ++w) {
        const std::int64_t ahead = clock[static_cast<std::size_t>(w)] - slowest;
        if (owed[static_cast<std::size_t>(w)] && ahead <= staleness) {
          r.max_staleness = std::max<int>(r.max_staleness, static_cast<int>(ahead));
          answer(w);
          owed[static_cast<std::size_t>(w)] = false;
          progress = true;
        }
      }
      // Forget delivered answers (their buffers too).
      std::size_t done = 0;
      while (done < sends.size() && sends[done]->test()) sends[done++]->wait();
      if (done) {
        sends.erase(sends.begin(), sends.begin() + static_cast<std::ptrdiff_t>(done));
        sent.erase(sent.begin(), sent.begin() + static_cast<std::ptrdiff_t>(done));
      }
      if (!progress) {
        // Nothing to do until another gradient arrives (the bound only guards the loop).
        std::unique_lock<std::mutex> lock(arrivals->mu);
        arrivals->cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return arrivals->count != arrived_before; });
      }
    }
    for (int w = 0; w < workers; ++w) answer(w);  // the final weights, the same for everyone
    for (auto& wk : sends) wk->wait();
    r.steps = steps;
    r.comm_seconds = 0;
    r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return r;
  }
  auto serve_weights = [&](std::vector<comm::WorkPtr>& works) {
    for (int w = 0; w < workers; ++w) works.push_back(comm->isend(shard.value().raw_data(), n, comm_dtype(shard.value()), w));
  };
  for (std::int64_t step = first_step; step < steps; ++step) {
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
    ++r.updates;
    const bool last_step = step + 1 == steps;
    if (checkpoints.at && checkpoints.at(step + 1) && !(last_step && checkpoints.final_after_weights)) send_checkpoint();
    const auto next = checkpoints.stop_after && !last_step ? checkpoints.stop_after(step + 1) : ServerCheckpoints::kGoOn;
    if (next == ServerCheckpoints::kGoOn) continue;
    send_checkpoint();
    if (next == ServerCheckpoints::kStop) {
      std::vector<comm::WorkPtr> final_weights;
      serve_weights(final_weights);
      for (auto& wk : final_weights) wk->wait();
    }
    r.stopped = true;
    r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return r;
  }
  std::vector<comm::WorkPtr> last;
  serve_weights(last);
  for (auto& wk : last) wk->wait();
  if (checkpoints.at && steps > first_step && checkpoints.at(steps) && checkpoints.final_after_weights) send_checkpoint();
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

void ParameterServer::prepare(ModelPart& part) {
  model_bytes_ = part.model.num_parameters() * 4;
  if (job_->rank() == 0) link_ = measure_link(*job_, workers_, true, part.model.num_parameters());
  worker_ = std::make_unique<ParameterServerWorker>(part.model, job_, workers_, servers_, staleness_);
}

void ParameterServer::after_backward(CommStats& stats) {
  worker_->push();
  const double s = worker_->comm_seconds() - counted_;  // this step's pull and push
  counted_ = worker_->comm_seconds();
  stats.seconds += s;
  stats.exposed_seconds += s;
}

bool ParameterServer::apply(Optimizer& optimizer, CommStats&) {
  optimizer.set_steps(optimizer.steps() + 1);  // the servers' update
  ++steps_;
  return true;
}

std::optional<StateDict> ParameterServer::optimizer_state(Optimizer& optimizer, std::vector<StateDict>&) {
  if (job_->rank() != 0) return StateDict{};
  // The servers hold the optimizer state: worker 0 receives it, with the weights after this
  // step's update.
  std::vector<std::string> buffers;
  for (const auto& [key, t] : optimizer.state()) {
    const std::string shard = key.substr(0, key.find('.')) + ".shard";
    if (std::find(buffers.begin(), buffers.end(), shard) == buffers.end()) buffers.push_back(shard);
  }
  return worker_->receive_checkpoint(buffers);
}

double ParameterServer::model_seconds() const {
  const double bytes = static_cast<double>(model_bytes_);
  return link_ > 0 ? ps_cost_model_seconds(workers_, servers_, bytes, bytes, link_) * static_cast<double>(std::max<std::int64_t>(steps_, 1))
                   : 0.0;
}

std::vector<std::string> ParameterServer::report_lines() {
  if (link_ <= 0) return {};
  const double steps = static_cast<double>(std::max<std::int64_t>(steps_, 1));
  return {fmt::format("parameter server, {} worker(s), {} server(s): communication {:.3f} ms per step measured; seed 003's "
                      "model N*g/(M*BW) + N*W/(M*BW) gives {:.3f} ms (g = W = {:.2f} MB, BW = {:.2f} GB/s measured point "
                      "to point)",
                      workers_, servers_, 1e3 * worker_->comm_seconds() / steps, 1e3 * model_seconds() / steps,
                      static_cast<double>(model_bytes_) / 1e6, link_ / 1e9)};
}

void ParameterServer::summarize(nlohmann::json& summary) const {
  if (link_ <= 0) return;
  summary["ps_model_seconds"] = model_seconds();
  summary["ps_link_gbps"] = link_ / 1e9;
}

}  // namespace weft::parallel
