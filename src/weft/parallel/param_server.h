// The parameter server (seed 003 chapter 2), synchronous, with the model sharded across M
// server ranks. The job has N workers (ranks 0..N-1) and M servers (ranks N..N+M-1).
//
// Each step: every server sends its shard of the weights to every worker (pull, fan-out);
// the workers compute gradients on their shards of the batch and send each server its part
// (push, fan-in); every server averages the N gradients of its shard (in worker order) and
// applies the optimizer to it. Mathematically the same step as data-parallel training with
// all-reduce, which the tests check.
//
// Asynchronous (staleness >= 0, stale synchronous parallel, Ho et al. 2013): a server
// applies each worker's gradient (scaled by 1/N) as soon as it arrives and answers that
// worker with the current weights, unless the worker is more than `staleness` steps ahead of
// the slowest one: then the answer waits until the slowest catches up (with staleness 0,
// which waits for every gradient of a step anyway, they are applied in worker order, so the
// result does not depend on the order they arrive in). Staleness 0 gives
// every worker the weights after all of the previous step's gradients (with plain SGD, the
// synchronous result); larger bounds let fast workers run ahead. Each worker-server pair
// talks over its own communicator, so a server serves whichever worker is ready.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "weft/comm/communicator.h"
#include "weft/nn/module.h"
#include "weft/optim/optimizer.h"
#include "weft/parallel/strategy.h"

namespace weft::parallel {

// The flat parameter vector (registration order) split into `servers` balanced shards.
struct ShardLayout {
  std::int64_t total = 0;
  std::vector<std::int64_t> bounds;  // shard s = [bounds[s], bounds[s + 1])
  ShardLayout(const Module& model, int servers);
  std::int64_t size(int s) const { return bounds[s + 1] - bounds[s]; }
};

class ParameterServerWorker {
 public:
  // `comm` is the whole job (workers and servers); staleness < 0: synchronous.
  ParameterServerWorker(Module& model, std::shared_ptr<comm::Communicator> comm, int workers, int servers,
                        int staleness = -1);
  // Receives the current weights from every server into the model. Blocks.
  void pull();
  // Sends this step's gradients to the servers; they complete with the next pull.
  void push();
  double comm_seconds() const { return comm_seconds_; }
  // Checkpoints (worker 0, synchronous mode): receives from every server its shard of the
  // weights and of each optimizer buffer (`buffers`: the optimizer's state keys, in order)
  // after the update of this step; installs the weights in the model and returns the
  // optimizer state consolidated per parameter (the keys an unsharded optimizer uses).
  StateDict receive_checkpoint(const std::vector<std::string>& buffers);

 private:
  Module& model_;
  std::shared_ptr<comm::Communicator> comm_;
  int workers_, servers_;
  ShardLayout layout_;
  std::vector<std::shared_ptr<comm::Communicator>> pairs_, grad_pairs_;  // asynchronous: per server
  std::vector<Var> params_;
  Tensor weights_, grads_;
  std::vector<comm::WorkPtr> pending_;
  double comm_seconds_ = 0;
};

struct ServerReport {
  bool stopped = false;         // stop_after ended it (below)
  double seconds = 0;           // wall time of the serving loop
  double comm_seconds = 0;      // in pulls and pushes
  std::int64_t steps = 0;
  std::int64_t updates = 0;     // optimizer steps (asynchronous: one per worker push)
  int max_staleness = 0;        // asynchronous: the most steps a worker ran ahead of the slowest
};

// Where a server sends worker 0 a checkpoint (synchronous mode): after the update that
// completes step `s` when at(s) is true; at the last step, after the final weights when
// `final_after_weights` (the worker saves after its final pull), else before them.
// A live job (parallel/elastic.h) asks stop_after(s) after each step but the last: kGoOn,
// or the job changes here: the server sends worker 0 its state (kHandOver) and also the
// final weights (kStop: the job ends) and returns.
struct ServerCheckpoints {
  std::function<bool(std::int64_t)> at;
  bool final_after_weights = false;
  enum Next { kGoOn, kHandOver, kStop };
  std::function<Next(std::int64_t)> stop_after;
};

// Runs server `server` (0..M-1) from step `first_step` to `steps` (absolute), then sends
// the final weights once more. `model` gives the starting weights (built from the same seed
// as the workers', or loaded from a checkpoint); `resume_state` (may be null) the
// consolidated optimizer state to take this server's shard of; `make_optimizer` builds the
// optimizer over the shard; `lr_at(step)` is the schedule.
ServerReport run_parameter_server(Module& model, std::shared_ptr<comm::Communicator> comm, int workers, int servers,
                                  int server, std::int64_t steps,
                                  const std::function<std::unique_ptr<Optimizer>(std::vector<std::pair<std::string, Var>>)>&
                                      make_optimizer,
                                  const std::function<double(std::int64_t)>& lr_at, int staleness = -1,
                                  std::int64_t first_step = 0, const StateDict* resume_state = nullptr,
                                  const ServerCheckpoints& checkpoints = {});

// The point-to-point bandwidth between worker 0 and server 0 (bytes per second, median of
// 5 ping-pongs of `elements` 4-byte elements), measured before training; both ranks must
// call it, others skip. Returns 0 on the server side.
double measure_link(comm::Communicator& job, int workers, bool is_worker0, std::int64_t elements);

// Seed 003 chapter 4's model: push N g / (M BW) + pull N W / (M BW), in seconds.
double ps_cost_model_seconds(int workers, int servers, double gradient_bytes, double weight_bytes,
                             double bytes_per_second);

// The strategy, on a worker: pull the weights before each step, push the gradients after
// backward; the servers update (the local optimizer only counts their updates). Worker 0
// receives the servers' state for checkpoints, and measures the link for seed 003's cost
// model (the servers' side is serve_parameters' job).
class ParameterServer : public Strategy {
 public:
  ParameterServer(std::shared_ptr<comm::Communicator> job, int workers, int servers, int staleness)
      : job_(std::move(job)), workers_(workers), servers_(servers), staleness_(staleness) {}
  std::string name() const override { return staleness_ >= 0 ? "ps-async" : "ps"; }
  void prepare(ModelPart& part) override;
  void begin_step() override { worker_->pull(); }
  void after_backward(CommStats& stats) override;
  bool apply(Optimizer& optimizer, CommStats& stats) override;
  void finish() override { worker_->pull(); }  // the final weights
  std::optional<StateDict> optimizer_state(Optimizer& optimizer, std::vector<StateDict>& per_rank) override;
  std::vector<std::string> report_lines() override;
  void summarize(nlohmann::json& summary) const override;  // "ps_model_seconds", "ps_link_gbps"
  bool shards_state() const override { return true; }
  bool servers_hold_state() const override { return true; }
  // Seed 003's cost model for this run's steps, and the link it used (0 when not measured).
  double model_seconds() const;
  double link_bytes_per_second() const { return link_; }

 private:
  std::shared_ptr<comm::Communicator> job_;
  int workers_, servers_, staleness_;
  std::unique_ptr<ParameterServerWorker> worker_;
  double link_ = 0, counted_ = 0;
  std::int64_t model_bytes_ = 0, steps_ = 0;  // steps: this run's updates
};

}  // namespace weft::parallel
