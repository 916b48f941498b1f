// How a training step meets communication. A Strategy is one way of spreading a step over
// ranks; the training loop sees them only through `Strategies`, their composition:
//
//   model-parallel strategies (they split the model; in the order they wrap each other)
//     TensorParallel   every layer sliced over the mesh's tp group        (tensor_parallel.h)
//     Pipeline         the blocks cut into stages over the pp group       (pipeline.h)
//   at most one data-parallel strategy (replicas of what the above leave this rank)
//     DataParallel     DDP: gradients averaged in buckets, overlapping backward   (ddp.h)
//     Zero             ZeRO 1/2/3: optimizer state, gradients, parameters sharded (zero.h)
//     ParameterServer  workers push gradients to and pull weights from server ranks (param_server.h)
//     FederatedAveraging  local steps, then the weights averaged         (fedavg.h)
//
// A 3D mesh with ZeRO is the composition {TensorParallel, Pipeline, Zero}. One step:
//
//   begin_step          every strategy (ps: pull the weights; zero-3: gather parameters)
//   forward, backward   by the outermost strategy that runs them (a pipeline: its schedule
//                       of micro-batches), else the task's loss on the whole model
//   update              where the schedule puts it (a pipeline may update per micro-batch):
//                         after_backward (ddp: wait for the buckets; zero: reduce; ps: push),
//                         clip the gradients by the whole model's norm,
//                         apply (zero: the shard's update; ps: nothing, servers update) or
//                         the optimizer's step
//   end_step            every strategy (fedavg: average the weights every few steps)
//
// Checkpoints: the data-parallel strategy produces this rank's optimizer state per
// parameter (zero: consolidated; ps: received from the servers), then the model-parallel
// ones widen it in order (tensor parallelism: the slices all-gathered; pipeline: every stage
// sent to stage 0), so rank 0 writes one whole model that resumes on any layout. A restore
// narrows in the same order.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "weft/comm/communicator.h"
#include "weft/nn/module.h"
#include "weft/optim/optimizer.h"
#include "weft/parallel/spans.h"
#include "weft/parallel/stage_model.h"

namespace weft::parallel {

class GptPipeline;

using NamedParameters = std::vector<std::pair<std::string, Var>>;

// The squared norms of this rank's own gradient (before the replicas' all-reduce) and of the
// replicas' mean (after), of the last synchronized pass: what the gradient noise scale is
// estimated from (train/noise_scale.h).
struct GradientNorms {
  double local_sq = 0, mean_sq = 0;
};
using OptimizerFactory = std::function<std::unique_ptr<Optimizer>(NamedParameters)>;

// One batch of a step on this rank: inputs (images [B, C, H, W] or token ids [B, T]) and a
// class per sample or per token.
struct StepBatch {
  Tensor inputs;
  std::vector<std::int32_t> targets;
  // The loss's gradient is scaled by this: a replica's share of an unevenly dealt global
  // batch (data/deal.h), so that the replicas' mean gradient is the whole batch's.
  double weight = 1;
  std::vector<std::int64_t> samples{};  // which training samples the rows are (empty: unknown)
};

// The task's loss of a batch on the whole model in this process.
using LossFn = std::function<Var(Module& model, const StepBatch& batch)>;

// What this rank holds and computes with, as the strategies shape it in prepare().
struct ModelPart {
  // `frozen`: parameters nobody trains (frozen layers, train/task.h), left out of `trained`.
  explicit ModelPart(Module& m, std::function<bool(const std::string&)> frozen_names = {})
      : model(m), frozen(std::move(frozen_names)) {
    for (const auto& [name, p] : m.named_parameters()) {
      layout.emplace_back(name, p.shape());
      if (!is_frozen(name)) trained.emplace_back(name, p);
    }
  }
  bool is_frozen(const std::string& name) const { return frozen && frozen(name); }
  Module& model;                      // the whole model as built (other stages' layers freed)
  std::vector<std::pair<std::string, Shape>> layout;  // every parameter's name and full shape, in order
  StageModel* stage = nullptr;        // a GPT's pieces (whole or sliced), when model-parallel
  NamedParameters trained;            // the parameters this rank updates, by full-model names
  NormWeight norm_weight;             // each parameter's share of the model's squared norm
  comm::Communicator* model_group = nullptr;  // the ranks holding the rest of one model copy
  bool accumulates = false;           // gradients accumulate over micro-batches before an update
  std::function<bool(const std::string&)> holds;  // whether this rank's stage keeps a parameter
  std::function<bool(const std::string&)> frozen;  // parameters nobody trains (the same on every rank)
};

// The model and optimizer state as a checkpoint holds it (rank 0: the whole model).
struct TrainState {
  StateDict model;
  StateDict optimizer;              // keys "<buffer>.<parameter>", as one unsharded optimizer
  std::vector<StateDict> per_rank;  // zero: each rank's shard as it holds it
};

// Communication of the strategies, for reports and timelines.
struct CommStats {
  double seconds = 0;          // communication, launch to finish
  double exposed_seconds = 0;  // of which the step waited for
  std::vector<Span> spans;     // the last step's
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  // Model-parallel strategies split the model; the others keep replicas of what they get.
  virtual bool splits_model() const { return false; }
  // Shapes the part this rank holds (slices, a stage, shards).
  virtual void prepare(ModelPart& part) {}
  // The optimizer this strategy updates with, when it owns one (zero: over its shard).
  virtual Optimizer* optimizer() { return nullptr; }

  virtual void begin_step() {}
  // Runs forward and backward of `batch`, calling update(more) where the schedule updates
  // (more: micro-batches follow in this step); returns the loss, or nullopt when this
  // strategy leaves that to the task.
  virtual std::optional<double> forward_backward(const StepBatch& batch, const std::function<void(bool)>& update) {
    return std::nullopt;
  }
  // The loss without gradients (evaluation), or nullopt.
  virtual std::optional<double> eval_loss(const StepBatch& batch) { return std::nullopt; }
  virtual void after_backward(CommStats& stats) {}
  // Clips by the norm over every rank's gradients, when this strategy holds them its own
  // way (zero: shards); nullopt otherwise.
  virtual std::optional<double> clip_grad_norm(const ModelPart& part, double max_norm) { return std::nullopt; }
  // Applies the update; false: the optimizer's own step does.
  virtual bool apply(Optimizer& optimizer, CommStats& stats) { return false; }
  // Between two updates of one step (a pipeline updating per micro-batch).
  virtual void between_updates() {}
  // After the step numbered `step` (counted from 1; `last`: of the run); true when it ended
  // a round worth an evaluation (fedavg).
  virtual bool end_step(std::int64_t step, bool last, CommStats& stats) { return false; }
  virtual void begin_eval() {}
  virtual void end_eval() {}
  // Training is over: rank 0's model holds every trained parameter (what it saves).
  virtual void finish() {}

  // Checkpoints: every rank calls these (they are collective).
  virtual std::optional<StateDict> optimizer_state(Optimizer& optimizer, std::vector<StateDict>& per_rank) {
    return std::nullopt;
  }
  // The model's parameters when this strategy keeps them elsewhere (offloaded), else none.
  virtual std::optional<StateDict> model_state() { return std::nullopt; }
  virtual void end_checkpoint() {}
  virtual void widen(TrainState& state) {}      // model-parallel: toward rank 0's whole model
  virtual void narrow(StateDict& optimizer) {}  // model-parallel: a whole model's state -> this rank's
  // Loads this rank's part of the optimizer state (narrowed); false: the optimizer does.
  virtual bool load_optimizer_state(const StateDict& state) { return false; }
  // Lines for the run's output (rank 0 prints them): before training, and after it.
  virtual std::vector<std::string> intro_lines() { return {}; }
  virtual std::vector<std::string> report_lines() { return {}; }
  // The run's summary: this strategy's figures (ZeRO's memory, a pipeline's bubble, ...).
  virtual void summarize(nlohmann::json& summary) const {}

  // What the training loop asks (through Strategies, never by the strategy's type):
  // this rank holds only a part of the state (ZeRO's shards; the servers hold a parameter
  // server's);
  virtual bool shards_state() const { return false; }
  // the state comes from the servers, who send it when a live job's change is agreed (ps);
  virtual bool servers_hold_state() const { return false; }
  // the pipeline's stages and their partition (none without one);
  virtual const GptPipeline* pipeline() const { return nullptr; }
  // DDP's gradient norms, measured from the next step on once asked (false: no DDP here);
  virtual bool measure_gradient_norms() { return false; }
  virtual const GradientNorms* gradient_norms() const { return nullptr; }
  // the federated round the last step was in;
  virtual std::optional<std::int64_t> round() const { return std::nullopt; }
  // the bytes of parameters kept in memory when they live in a file (param-offload);
  virtual std::optional<std::int64_t> resident_parameter_bytes() const { return std::nullopt; }
  // the parameter elements this rank holds when it holds a shard of them (zero-3).
  virtual std::optional<std::int64_t> rank_parameter_elements() const { return std::nullopt; }
};

class Strategies {
 public:
  // `frozen` names parameters that are not trained (no gradients, no optimizer state).
  explicit Strategies(Module& model, const std::function<bool(const std::string&)>& frozen = {})
      : part_(model, frozen) {}
  Strategies(const Strategies&) = delete;
  Strategies& operator=(const Strategies&) = delete;

  // In wrapping order: model-parallel ones first (tensor, then pipeline), then at most one
  // data-parallel one.
  void add(std::unique_ptr<Strategy> strategy);
  // Shapes the part, then builds the optimizer over the trained parameters unless a
  // strategy owns one.
  void prepare(const OptimizerFactory& make_optimizer);
  // The strategy of type S, if one was added (tests, and the strategies' own composition;
  // the training loop asks the questions below instead).
  template <typename S>
  S* find() const {
    for (const auto& s : all_)
      if (auto* p = dynamic_cast<S*>(s.get())) return p;
    return nullptr;
  }
  const ModelPart& part() const { return part_; }

  // The strategies' answers (Strategy's questions): the first that has one.
  bool holds_whole_state() const;
  bool servers_hold_state() const;
  const GptPipeline* pipeline() const;  // null: no pipeline
  bool measure_gradient_norms();
  const GradientNorms* gradient_norms() const;
  std::optional<std::int64_t> round() const;
  std::optional<std::int64_t> resident_parameter_bytes() const;
  std::int64_t rank_parameter_elements() const;  // the trained parameters' elements this rank holds
  void summarize(nlohmann::json& summary) const;
  Optimizer& optimizer() { return *optimizer_; }
  std::string describe() const;  // "tensor-parallel + pipeline + zero-2", or "single"

  // Step `number` (counted from 1 over the whole run, resumes included) on this rank's
  // batch: zero_grad, then as the header says. Returns this rank's loss.
  double step(std::int64_t number, bool last, const StepBatch& batch, const LossFn& loss, double clip_norm);
  // The loss of a batch without gradients (language models' validation).
  double eval_loss(const StepBatch& batch, const LossFn& loss);
  // Around an evaluation on the whole model (zero-3 gathers and releases the parameters).
  void begin_eval();
  void end_eval();
  // True when the last step ended a federated round.
  bool round_ended() const { return round_ended_; }
  void finish();

  TrainState gather_state();  // collective; complete on rank 0
  void restore(const StateDict& optimizer, std::int64_t optimizer_steps);
  std::vector<std::string> intro_lines();
  std::vector<std::string> report_lines();

  // Communication so far, and the last step's spans (all of them while recording).
  CommStats& stats() { return stats_; }
  void record_spans(bool on) { record_ = on; }

 private:
  void update(bool more, double clip_norm);
  std::vector<Strategy*> gather_order() const;  // data-parallel first, then model-parallel in order

  ModelPart part_;
  std::vector<std::unique_ptr<Strategy>> all_;
  std::unique_ptr<Optimizer> own_optimizer_;
  Optimizer* optimizer_ = nullptr;
  CommStats stats_;
  bool round_ended_ = false, record_ = false;
};

}  // namespace weft::parallel
