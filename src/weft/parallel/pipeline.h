// Pipeline parallelism for the GPT (seed 002 chapter 8, seed 003 chapters 6-7): the blocks
// are split into S stages (S x chunks virtual stages with the interleaved schedule), one per
// rank of the pipeline group; a batch is cut into M micro-batches that flow through the
// stages in the order an `algo` pipeline program gives (naive, gpipe, 1f1b, interleaved,
// seed). Activations go forward and their gradients backward as point-to-point messages of
// the communicator (so WEFT_TRACE records them).
//
// Every rank builds the whole model with the same seed, so the initial parameters equal
// one process's, frees the layers of the other stages, and trains only its own: the first stage the token and position
// embeddings, the last the final layer norm, both the token embedding (the head is tied to
// it: their gradients are summed between the two stages before the update, as Megatron-LM
// does). Gradient clipping uses the norm over every stage.
//
// The partition balances the stages by parameter count or by measured time (seed 003
// chapter 7's load balancing): contiguous blocks, the embedding counted on the first stage
// and the head on the last, minimizing the largest stage. A frozen block (seed 003 chapter
// 8) counts two thirds: its backward computes the input's gradient, not its weights'. Ranks of different speeds (seed
// 003 chapter 12) get blocks in proportion to their speed: the partition minimizes the
// largest stage's cost divided by its rank's speed (--stage-shares).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "weft/algo/pipeline.h"
#include "weft/comm/communicator.h"
#include "weft/nn/transformer.h"
#include "weft/parallel/stage_model.h"
#include "weft/parallel/strategy.h"

namespace weft::parallel {

struct PipelineOptions {
  int micro_batches = 1;
  algo::PipeSchedule schedule = algo::PipeSchedule::k1F1B;
  int chunks = 1;                  // model chunks per stage (interleaved)
  std::string balance = "params";  // params | time
  std::vector<double> stage_speeds{};  // each stage's rank's relative speed (empty: all equal)
  // Called after each micro-batch's computation with its seconds (the run's step hooks: a
  // test's slower rank); none by default.
  std::function<void(double seconds)> after_compute{};
  std::int64_t frozen_blocks = 0;    // the leading blocks frozen: they cost 2/3 (no weight gradients)
};

// Contiguous parts of `costs` (one per block) into `parts` pieces, `first_extra` added to
// the first and `last_extra` to the last, minimizing the largest piece's cost over its
// speed (part p runs at speeds[p % speeds.size()]; none: all 1). Returns the boundaries:
// part p is blocks [b[p], b[p+1]). Throws ConfigError when parts > blocks.
std::vector<std::int64_t> balance_blocks(const std::vector<double>& costs, int parts, double first_extra, double last_extra,
                                         const std::vector<double>& speeds = {});

class GptPipeline {
 public:
  // `group` holds the pipeline's ranks in stage order (null or size 1: one stage); `model`
  // is the whole GPT (LocalGpt) or this rank's tensor-parallel slice of it.
  GptPipeline(StageModel& model, std::shared_ptr<comm::Communicator> group, const PipelineOptions& options);

  int stage() const { return stage_; }
  int stages() const { return stages_; }
  // Every virtual stage's first block, and the block count at the end.
  const std::vector<std::int64_t>& boundaries() const { return bounds_; }
  // The stages whose blocks all fall under `frozen` in the partition that counts every
  // block as trained (so a stage's blocks freeze together, however the frozen ones are
  // balanced since): those adaptive model parallelism can give up.
  int stages_frozen(std::int64_t frozen) const;
  // The partition for stages of relative `speeds` (the same costs); this stage's cost (its
  // blocks', with the embedding or the head), in the units the partition balances.
  std::vector<std::int64_t> partition_for(const std::vector<double>& speeds) const;
  double stage_cost() const;
  // The parameters this stage trains.
  std::vector<std::pair<std::string, Var>> own_parameters() const { return own_; }

  // One batch (ids [B, T], B divisible by M) through the pipeline: forward and backward of
  // every micro-batch; gradients accumulate in the own parameters (tied ones summed across
  // stages). `update` runs the optimizer: once at the end, or (seed schedule) after each
  // micro-batch's backward. Returns the batch's loss, on every stage.
  // `weight` scales the step's gradients (a replica's share of an uneven global batch).
  double train_batch(const Tensor& ids, const std::vector<std::int32_t>& targets, const std::function<void()>& update,
                     double weight = 1);
  // Forward only (evaluation): the mean loss, on every stage.
  double eval_batch(const Tensor& ids, const std::vector<std::int32_t>& targets);
  // The parameter whose gradient norm another stage counts (the tied embedding on the last
  // stage), for clip_grad_norm; empty when none.
  std::string counted_elsewhere() const { return stages_ > 1 && last_ && !first_ ? tied_name() : ""; }
  // The token embedding when the head reuses it (held by the first and the last stage), else empty.
  std::string tied_name() const { return model_.config().tied_head ? GPT::tied_weight() : ""; }
  // Copies every stage's parameters into `full` (the whole model's, by name, the same list
  // on every stage; `shapes` their full shapes) on stage 0 (for sampling, saving).
  void gather_parameters(const std::vector<std::pair<std::string, Var>>& full, const std::map<std::string, Shape>& shapes);
  int owner_of(const std::string& name) const;  // the stage that trains a parameter

  // The last train_batch's bubble: 1 - busy / step (busy: forward and backward; step: the
  // whole step without the optimizer), averaged over the stages.
  double last_bubble() const { return bubble_; }
  // The last train_batch's computation on this stage (forward and backward, not waits), s.
  double last_busy() const { return busy_; }
  // The last train_batch's time in sends, receives and the waits for them on this stage, s.
  double last_comm() const { return comm_; }

 private:
  struct Pending {
    Var input, output, loss;
  };
  void sum_tied_gradients();
  void computed_since(std::chrono::steady_clock::time_point t0) const;  // to options.after_compute
  double run(const Tensor& ids, const std::vector<std::int32_t>& targets, bool train, const std::function<void()>& update,
             double weight = 1);

  StageModel& model_;
  std::shared_ptr<comm::Communicator> group_, tied_;
  PipelineOptions options_;
  int stage_ = 0, stages_ = 1, virtual_stages_ = 1;
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges_;  // per chunk
  std::vector<std::int64_t> bounds_, trained_bounds_;  // trained_bounds_: as if no block were frozen
  std::vector<std::pair<std::string, Var>> own_;
  Var tied_weight_;
  bool first_ = true, last_ = true;
  double bubble_ = 0, busy_ = 0, comm_ = 0;
  std::vector<double> costs_;  // per block, as balanced
  double first_extra_ = 0, last_extra_ = 0;
};

// The strategy: the GPT's blocks cut into stages over the mesh's pp group, each stage
// computing with what the strategies before it left (the whole model, or tensor-parallel
// slices). Gradients accumulate over the micro-batches; the update runs where the schedule
// puts it. Checkpoints send every stage's state to stage 0.
class Pipeline : public Strategy {
 public:
  Pipeline(std::shared_ptr<comm::Communicator> group, comm::Communicator* model_group, PipelineOptions options)
      : group_(std::move(group)), model_group_(model_group), options_(options) {}
  std::string name() const override { return "pipeline"; }
  bool splits_model() const override { return true; }
  void prepare(ModelPart& part) override;
  std::optional<double> forward_backward(const StepBatch& batch, const std::function<void(bool)>& update) override;
  std::optional<double> eval_loss(const StepBatch& batch) override;
  bool end_step(std::int64_t step, bool last, CommStats& stats) override;  // its sends and receives
  void finish() override;
  void widen(TrainState& state) override;
  void narrow(StateDict& optimizer) override;
  std::vector<std::string> intro_lines() override;
  std::vector<std::string> report_lines() override;

  void summarize(nlohmann::json& summary) const override;  // "pipeline": stages, schedule, bubble
  const GptPipeline* pipeline() const override { return pipe_.get(); }
  GptPipeline& pipeline() { return *pipe_; }
  // The measured bubble, mean over the steps after the first of this run; and the
  // (S - 1) / (M + S - 1) of GPipe and 1F1B.
  double bubble() const;
  double bubble_formula() const;

 private:
  std::shared_ptr<comm::Communicator> group_;
  comm::Communicator* model_group_;
  PipelineOptions options_;
  std::unique_ptr<LocalGpt> local_;
  std::unique_ptr<GptPipeline> pipe_;
  ModelPart* part_ = nullptr;
  std::int64_t steps_ = 0;
  double bubble_sum_ = 0, comm_ = 0;
};

}  // namespace weft::parallel
