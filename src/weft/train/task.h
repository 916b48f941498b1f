// What differs between training an image classifier and a language model: the data, the
// model, the loss, the evaluation and what is reported. The training loop (loop.h) is the
// same for both; a Task answers its questions.
//
// An epoch is rows_per_epoch() samples walked in global batches of --batch rows (the last
// one shorter); batch(epoch, at) is this replica's part of the global batch that starts `at`
// samples into the epoch (images: the next rows of the epoch's seeded order; text: the
// random windows every rank draws alike from the run's generator), dealt among the replicas
// in proportion to their speeds (data/deal.h: even by default), with the weight that makes
// the replicas' mean gradient the whole batch's. Nothing about the replicas enters the
// order, so a run resumed on another number of ranks continues the epoch exactly.
#pragma once

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "weft/data/deal.h"
#include "weft/nn/model_recipe.h"
#include "weft/nn/module.h"
#include "weft/parallel/rank_group.h"
#include "weft/parallel/strategy.h"
#include "weft/tensor/rng.h"
#include "weft/train/options.h"

namespace weft {

struct Evaluation {
  std::string name;    // "test accuracy", "validation loss"
  std::string text;    // as printed: "test accuracy 87.74%"
  std::string field;   // the summary's JSON field: test_accuracy, val_loss
  double value = 0;
};

class Task {
 public:
  // `replica` of `replicas`: this rank's place among the data-parallel replicas.
  Task(std::int64_t global_batch, int replica, int replicas)
      : global_batch_(global_batch), replica_(replica), speeds_(static_cast<std::size_t>(replicas), 1.0) {}
  virtual ~Task() = default;
  // The model's architecture; make_model builds it.
  virtual ModelRecipe recipe() const = 0;
  std::shared_ptr<Module> make_model(Rng& rng) const {
    auto model = recipe().build(rng);
    initialize(*model);
    return model;
  }
  // Parameters the model starts from other than its initialization (a language model's
  // --init-from); none by default.
  virtual void initialize(Module& model) const {}
  // What a saved model or checkpoint records to be rebuilt for inference: the recipe, and
  // a language model's tokenizer (weft_tokenizer, weft_tokenizer_vocabulary).
  virtual Metadata model_metadata() const { return recipe().to_metadata(); }
  // The name a checkpoint records and a resume checks ("cnn", "lm-gpt").
  virtual std::string model_tag() const = 0;
  // A line about the data and the model, printed before training (empty: none).
  virtual std::string describe(const Module& model) const { return {}; }
  // The samples of one epoch (a language model's: --max-steps global batches).
  virtual std::int64_t rows_per_epoch() const = 0;
  std::int64_t steps_per_epoch() const { return batches_left(rows_per_epoch(), 0, global_batch_); }
  std::int64_t global_batch() const { return global_batch_; }
  virtual std::int64_t epochs() const = 0;
  // True when the data is drawn rather than walked (a language model's random windows): the
  // one epoch is the run's --max-steps steps, and a resumed run goes on from its step
  // whatever --max-steps (and --batch) it now has.
  virtual bool epoch_is_the_run() const { return false; }
  // What one sample is counted in: "samples" (images) or "tokens", and how many per row.
  virtual std::string unit() const = 0;
  virtual std::int64_t units_per_row() const { return 1; }
  // The name under which a checkpoint keeps the run's generator ("init", "sampler").
  virtual std::string generator_name() const = 0;

  // The rows of the global batch at `at` samples into `epoch` (at < rows_per_epoch()).
  std::int64_t rows_at(std::int64_t at) const { return std::min(global_batch_, rows_per_epoch() - at); }
  // The replicas' relative speeds for the batches that follow (one per replica, > 0).
  void set_speeds(std::vector<double> speeds);
  // A new global batch and place among new replicas (a live elastic job's next
  // generation), the data kept, the speeds even again; false (nothing changed) when the
  // task cannot take that batch without being made again.
  bool regroup(std::int64_t global_batch, int replica, int replicas) {
    if (global_batch != global_batch_ && !batch_may_change()) return false;
    global_batch_ = global_batch;
    replica_ = replica;
    speeds_.assign(static_cast<std::size_t>(replicas), 1.0);
    regrouped();
    return true;
  }
  const std::vector<double>& speeds() const { return speeds_; }
  // This replica's part of the global batch at `at` samples into `epoch`; `step` is the
  // optimizer steps taken (for the sample log).
  virtual parallel::StepBatch batch(std::int64_t epoch, std::int64_t at, std::int64_t step, Rng& rng) = 0;
  virtual Var loss(Module& model, const parallel::StepBatch& batch) const = 0;
  // The loss from the model's output for the batch (a model whose layers are streamed,
  // parallel/param_offload.h); the tasks without one refuse.
  virtual Var output_loss(const Var& output, const parallel::StepBatch& batch) const {
    throw ConfigError("--offload params: this task's model is not one of layers in sequence");
  }
  // Layer freezing (seed 003 chapter 8): the model's first `layers` layers are frozen (the
  // loop leaves their parameters out of training). An image model's task computes them
  // without gradients and keeps each training sample's output of the last frozen layer (up
  // to `cache_bytes` of them) so that later epochs skip the frozen layers altogether; a
  // GPT's frozen blocks still pass gradients back to the (tied, trained) embedding, only
  // their weights' gradients go. Returns whether outputs are cached. Throws ConfigError when
  // the task's model has no such layers (the recurrent language models).
  virtual bool freeze(std::size_t layers, std::int64_t cache_bytes) {
    throw ConfigError("--freeze-below and --freeze-converged work with the image models and the GPT (layers in sequence)");
  }
  // The layers there are (a frozen prefix must leave at least one), and the layer a
  // parameter belongs to (-1: none, always trained).
  virtual std::size_t layers(const Module& model) const { return 0; }
  virtual int layer_of(const std::string& parameter) const;  // (layers in sequence: "3.weight" is layer 3)
  // Evaluates the model (the strategies give the whole model, or compute the loss on their
  // parts); `replicas` sums a sharded evaluation (null: one).
  virtual Evaluation evaluate(parallel::Strategies& strategies, const parallel::RankGroup& replicas) = 0;
  // The line after an evaluation: `train_loss` is the mean since the last one.
  virtual std::string progress_line(std::int64_t epoch, std::int64_t step, bool epoch_end, double train_loss,
                                    const Evaluation* evaluation, const std::string& rate) const = 0;
  // After training, on rank 0 with the whole model (language models: a generated sample).
  virtual void finish(Module& model, Rng& rng, std::FILE* out, nlohmann::json& summary) {}
  // Fields of the JSON summary only this task has.
  virtual void summarize(nlohmann::json& summary) const {}

 protected:
  // This replica's part of a global batch of `rows`, by the replicas' current speeds.
  DealtRows rows_of(std::int64_t rows) const { return deal_rows(rows, speeds_, replica_); }

  // After regroup: what the task keeps per replica (and batch) follows.
  virtual void regrouped() {}
  virtual bool batch_may_change() const { return false; }

  std::int64_t global_batch_;
  int replica_;

 private:
  std::vector<double> speeds_;
};

// The task `options` (resolved) name, with its data loaded; `replica` of `replicas` is this
// rank's place among the data-parallel replicas.
std::unique_ptr<Task> make_task(const TrainOptions& options, int replica, int replicas, std::FILE* out);

}  // namespace weft
