// ZeRO (Rajbhandari et al., 2020): data parallelism without the redundant copies. Every
// rank keeps 1/W of the optimizer state (stage 1), also of the gradients (stage 2), also of
// the parameters (stage 3), and the collectives put the pieces together.
//
// The parameters are laid out in one flat buffer of N elements, padded to a multiple of
// W; rank r owns elements [r·n, (r+1)·n), n = N/W, and runs the optimizer on that shard
// only — a Var whose value is the shard, so SGD, Adam and AdamW work unchanged and their
// state is sharded by construction.
//
//   stage 1  after backward: all-reduce (average) the gradients; update the shard;
//            all-gather the updated shards into every rank's full parameters.
//   stage 2  reduce-scatter (average) the gradients, so each rank keeps only its shard's;
//            update; all-gather the parameters. Given layers, backward reduce-scatters a
//            layer's gradients as soon as they are final and drops that layer's full
//            gradients, so a rank never holds them all (the rest after backward).
//   stage 3  between steps a rank holds only its shard of the parameters: gather() builds
//            the full parameters (all-gather) before forward, the gradients are
//            reduce-scattered, the shard is updated, and release() drops the full copy.
//            Given layers (a GPT's blocks), stage 3 gathers parameters layer by layer: a
//            layer's are all-gathered just before its forward and dropped after it, gathered
//            again when backward reaches the layer (when the layer after it has its
//            gradients), and dropped once the layer's gradients are reduce-scattered, which
//            happens right there in backward. A rank then holds the parameters outside the
//            layers (embeddings, final norm) plus one layer's.
//
// Layout: the parameters in units (the parameters outside every layer, then each layer; one
// unit without layers), each unit padded to a multiple of W and cut into W pieces; a rank's
// shard is its piece of every unit, one after another.
//
// With the same gradients the sharded update is the same arithmetic as the replicated one,
// so ZeRO differs from DDP only in the order in which the collectives add the gradients
// (one flat buffer here, DDP's buckets there; reduce-scatter for stages 2 and 3).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "weft/comm/communicator.h"
#include "weft/nn/module.h"
#include "weft/optim/optimizer.h"
#include "weft/parallel/strategy.h"

namespace weft::parallel {

// Bytes one rank holds between steps, and the most full parameters it held during a step
// (stages 1, 2: all of them; stage 3: the most gathered at once, which layer by layer is
// those outside the layers plus one layer's).
struct ZeroMemory {
  std::int64_t parameters = 0, gradients = 0, optimizer = 0;
  std::int64_t peak_parameters = 0;
  std::int64_t total() const { return parameters + gradients + optimizer; }
};

class ZeroRedundancyOptimizer {
 public:
  using OptimizerFactory = std::function<std::unique_ptr<Optimizer>(std::vector<std::pair<std::string, Var>>)>;

  // comm may be null (one process: a world of 1). Broadcasts rank 0's parameters. `layers`
  // (stages 2 and 3) names each layer's parameters by prefix ("h0.", "h1.", ...), in forward
  // order; under stage 3 the model must then call before_layer() and after_layer() around
  // each layer.
  ZeroRedundancyOptimizer(Module& model, std::shared_ptr<comm::Communicator> comm, int stage,
                          const OptimizerFactory& make_optimizer, const std::vector<std::string>& layers = {});
  // The same over some named parameters (a pipeline stage's, a tensor-parallel slice's),
  // sharded across `comm` (the data-parallel group).
  ZeroRedundancyOptimizer(const std::vector<std::pair<std::string, Var>>& params, std::shared_ptr<comm::Communicator> comm,
                          int stage, const OptimizerFactory& make_optimizer, const std::vector<std::string>& layers = {});
  ZeroRedundancyOptimizer(const ZeroRedundancyOptimizer&) = delete;
  ZeroRedundancyOptimizer& operator=(const ZeroRedundancyOptimizer&) = delete;

  // Stage 3: all-gather the parameters outside the layers (all of them without layers)
  // into the model, before forward or evaluation; a no-op when they are there, and for
  // stages 1 and 2. Returns the time it took.
  std::chrono::duration<double> gather();
  // Stage 3: every parameter, layers included (checkpoints, sampling, saving; not counted
  // in the peak of parameters during a step).
  void gather_all();
  // Stage 3: drop the full parameters (after the step or an evaluation).
  void release();
  // Stage 3 with layers, called by the model around layer i's forward: gather its
  // parameters; drop them again (when recording gradients, the last layer's stay for
  // backward, which starts there).
  void before_layer(std::size_t i);
  void after_layer(std::size_t i);
  // After backward: reduces the gradients (those of layers not yet reduced in backward).
  // Returns the time spent in communication.
  std::chrono::duration<double> finish();
  // Updates this rank's shard; stages 1 and 2 then all-gather the parameters. Returns the
  // time of that all-gather. Every ZeRO collective blocks: none overlaps computation.
  std::chrono::duration<double> step();

  Optimizer& optimizer() { return *optimizer_; }
  int stage() const { return stage_; }
  // After finish(): clips the gradients by their norm over every rank's shard (the norm of the
  // averaged full gradients); returns that norm. Under model parallelism each parameter's
  // squares count with weight(name) (a replicated copy 1/copies, a tied duplicate 0) and
  // are summed over `model_group` too, the ranks holding the rest of one model copy.
  double clip_grad_norm(double max_norm, const std::function<double(const std::string&)>& weight = {},
                        comm::Communicator* model_group = nullptr);

  // Checkpoints. Every rank calls gather_state(): the optimizer state consolidated per
  // parameter (the keys an unsharded optimizer uses, so a ZeRO checkpoint resumes on any
  // number of ranks, with or without ZeRO), and each rank's shard as it holds it.
  struct State {
    StateDict consolidated;
    std::vector<StateDict> per_rank;
  };
  State gather_state();
  // Takes this rank's shard of a consolidated state (from any world size).
  void load_state(const StateDict& consolidated);
  std::int64_t shard_elements() const { return shard_elements_; }
  ZeroMemory memory() const;

 private:
  // A unit of the layout: some parameters, all-gathered and reduce-scattered together.
  struct Unit {
    std::vector<std::size_t> params;
    std::int64_t begin = 0;         // in the padded full buffer
    std::int64_t piece = 0;         // elements per rank
    std::int64_t shard_offset = 0;  // of this rank's piece in its shard
    Tensor full;                    // gathered parameters (stage 3), else undefined
    bool reduced = false;           // this step's gradients are reduce-scattered
    int pending = 0;                // parameters whose gradients backward has still to finish
  };
  Tensor shard_of(const Tensor& full, int rank) const;  // a rank's pieces, from the full layout
  Tensor full_of(const Tensor& by_rank) const;          // W shards, one after another -> full layout
  void point_at(Unit& u, Tensor full);  // the unit's parameters become views of its full buffer
  Tensor take_gradients(const Unit& u);  // the unit's gradients in its padded layout; drops them
  void gather_unit(Unit& u, bool in_step = true);  // in_step: counts toward the peak of a step
  void release_unit(Unit& u);
  void reduce_unit(Unit& u);  // gradients -> this rank's piece of the averaged gradients
  void layer_gradients_ready(std::size_t unit);

  std::shared_ptr<comm::Communicator> comm_;
  int stage_, rank_ = 0, world_ = 1;
  std::vector<Var> params_;
  std::vector<std::string> names_;
  std::vector<Shape> shapes_;
  std::vector<std::int64_t> offsets_;  // in the padded full buffer
  std::vector<Unit> units_;            // [0]: outside the layers (or everything); then the layers
                                       // (stage 1: one unit; under stages 1 and 2 every unit's
                                       // full parameters stay)
  bool layered_ = false;
  std::int64_t elements_ = 0, padded_ = 0, shard_elements_ = 0;
  Tensor grad_shard_;   // stages 2, 3: this step's averaged gradients of the shard
  Var shard_;           // this rank's parameters: what the optimizer updates
  std::unique_ptr<Optimizer> optimizer_;
  std::int64_t gathered_bytes_ = 0, peak_parameter_bytes_ = 0;
  std::chrono::duration<double> backward_comm_{0};
};

// For writing a checkpoint: on construction every rank gathers the full parameters (stage
// 3) and the consolidated state; on destruction stage 3 drops the full parameters again. A
// null optimizer (no ZeRO) does nothing.
class ZeroCheckpointScope {
 public:
  explicit ZeroCheckpointScope(ZeroRedundancyOptimizer* zero) : zero_(zero) {
    if (!zero_) return;
    zero_->gather_all();
    state = zero_->gather_state();
  }
  ~ZeroCheckpointScope() {
    if (zero_) zero_->release();
  }
  ZeroCheckpointScope(const ZeroCheckpointScope&) = delete;
  ZeroCheckpointScope& operator=(const ZeroCheckpointScope&) = delete;
  ZeroRedundancyOptimizer::State state;

 private:
  ZeroRedundancyOptimizer* zero_;
};

// The strategy: ZeRO over the mesh's data-parallel group (null: a world of one, which
// still runs the sharded code). Stage 3 on a model with layers (and no model parallelism)
// gathers layer by layer through the model's layer hook.
class Zero : public Strategy {
 public:
  // `whole_model_at_end`: stage 3 gathers the parameters after the last step (what rank 0
  // saves or samples from); without it they stay sharded (the run's peak memory is the
  // steps', and the ranks hold no replica to compare).
  Zero(std::shared_ptr<comm::Communicator> group, int stage, OptimizerFactory make_optimizer, bool whole_model_at_end = true)
      : group_(std::move(group)), stage_(stage), make_optimizer_(std::move(make_optimizer)),
        whole_model_at_end_(whole_model_at_end) {}
  std::string name() const override { return "zero-" + std::to_string(stage_); }
  void prepare(ModelPart& part) override;
  Optimizer* optimizer() override { return &zero_->optimizer(); }
  void begin_step() override { gather_seconds_ += zero_->gather().count(); }
  void after_backward(CommStats& stats) override;
  std::optional<double> clip_grad_norm(const ModelPart& part, double max_norm) override {
    return zero_->clip_grad_norm(max_norm, part.norm_weight, part.model_group);
  }
  bool apply(Optimizer& optimizer, CommStats& stats) override;
  void between_updates() override { gather_seconds_ += zero_->gather().count(); }
  void begin_eval() override { zero_->gather(); }
  void end_eval() override { zero_->release(); }
  void finish() override;
  std::optional<StateDict> optimizer_state(Optimizer& optimizer, std::vector<StateDict>& per_rank) override;
  void end_checkpoint() override { zero_->release(); }
  bool load_optimizer_state(const StateDict& state) override {
    zero_->load_state(state);
    return true;
  }
  std::vector<std::string> report_lines() override;
  void summarize(nlohmann::json& summary) const override;  // "zero", "zero_memory"
  bool shards_state() const override { return true; }
  std::optional<std::int64_t> rank_parameter_elements() const override {
    return stage_ == 3 ? std::optional<std::int64_t>(zero_->shard_elements()) : std::nullopt;
  }

  ZeroRedundancyOptimizer& zero() { return *zero_; }
  int stage() const { return stage_; }
  // What the same state takes replicated (DDP): parameters, gradients, optimizer buffers.
  std::int64_t replicated_bytes() const;

 private:
  std::shared_ptr<comm::Communicator> group_;
  int stage_;
  OptimizerFactory make_optimizer_;
  bool whole_model_at_end_;
  std::unique_ptr<ZeroRedundancyOptimizer> zero_;
  Module* layered_ = nullptr;  // the model whose layer hook gathers (stage 3)
  std::int64_t elements_ = 0;
  double gather_seconds_ = 0;
};

}  // namespace weft::parallel
