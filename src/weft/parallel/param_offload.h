// Parameter offload (seed 003 chapter 8: what does not fit goes to host memory or disk, read
// back ahead of use; ZeRO-Infinity's parameters on NVMe): a model that runs in segments one
// after another keeps its trained parameters in a file, and only a few segments' worth are
// in memory at a time. The segments: of a model of layers in sequence (nn/sequential.h),
// each layer with parameters and the ones without that follow it; of a GPT, the embedding,
// each block, and the final norm with the head (the tied embedding, which both use, stays
// in memory and is updated after the backward). A step:
//
//   forward    segment by segment without gradients, each segment's parameters read in
//              (the next ones read ahead by a background thread) and dropped after it; the
//              input of every segment is kept
//   backward   from the last segment to the first: its parameters read in, its forward
//              computed again from the kept input with gradients, then its backward, which
//              gives the gradient of its input (for the segment before) and of its
//              parameters; those are averaged over the data-parallel replicas and applied
//              at once (the optimizer's update of those parameters alone, its state
//              offloaded too: state_store.h), and the parameters are written back
//
// Each parameter's update depends only on its own gradient and state, and a segment's
// backward needs only its own parameters (as they were before the step), so the step is
// the in-memory step's, with one forward more. Not with gradient clipping by the whole
// model's norm (every update would wait for every gradient). Evaluation streams the
// parameters through the forward the same way (eval_loss; an image model's through
// Sequential::set_around); checkpoints read them from the file; at the end the model gets
// them back in memory (what is saved).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weft/comm/communicator.h"
#include "weft/nn/sequential.h"
#include "weft/nn/transformer.h"
#include "weft/optim/state_store.h"
#include "weft/parallel/stage_model.h"
#include "weft/parallel/strategy.h"

namespace weft::parallel {

// The loss of a batch from a layered model's output (the task's: cross-entropy for
// classifiers).
using OutputLoss = std::function<Var(const Var& output, const StepBatch& batch)>;

class ParameterOffload : public Strategy {
 public:
  // `dir`: where the files go; `replicas`: the data-parallel group (null: one replica).
  ParameterOffload(std::string dir, std::shared_ptr<comm::Communicator> replicas, OutputLoss loss,
                   OptimizerFactory make_optimizer)
      : dir_(std::move(dir)), replicas_(std::move(replicas)), loss_(std::move(loss)),
        make_optimizer_(std::move(make_optimizer)) {}
  ~ParameterOffload() override;
  std::string name() const override { return replicas_ ? "param-offload + ddp" : "param-offload"; }
  void prepare(ModelPart& part) override;
  Optimizer* optimizer() override { return optimizer_.get(); }
  std::optional<double> forward_backward(const StepBatch& batch, const std::function<void(bool)>& update) override;
  std::optional<double> eval_loss(const StepBatch& batch) override;
  std::optional<StateDict> model_state() override;
  void finish() override;
  std::vector<std::string> intro_lines() override;

  // The bytes of parameters in memory at most (the slots'), and of all of them.
  std::int64_t resident_bytes() const { return store_->resident_bytes(); }
  std::optional<std::int64_t> resident_parameter_bytes() const override { return resident_bytes(); }
  std::int64_t total_bytes() const { return store_->total_bytes(); }

 private:
  // The store holds one entry per segment: its parameters one after another.
  struct Segment {
    std::size_t begin = 0, end = 0;      // a layered model's modules [begin, end)
    std::vector<std::size_t> params{};   // offloaded: indices into the trained list
    std::vector<Shape> shapes{};         // theirs
    std::int64_t numel = 0;              // their elements in all
  };
  void segment_layers(Sequential& layers);
  void segment_gpt(GPT& gpt);
  // The segment's parameters as views of `flat`, its whole, in order.
  static std::vector<Tensor> pieces(const Segment& s, const Tensor& flat);
  // Segment s on x (the batch's inputs for the first); the last one's output is the loss.
  Var run(std::size_t s, const Var& x, const StepBatch& batch);
  void load(const Segment& s);
  void drop(const Segment& s, bool changed);
  std::vector<std::size_t> order(bool backward, std::size_t segments = SIZE_MAX) const;
  std::vector<std::size_t> updates_order() const;
  // Each parameter of a segment as a view of `flat`, its whole.
  void place(const Segment& s, const Tensor& flat);

  std::string dir_;
  std::shared_ptr<comm::Communicator> replicas_;
  OutputLoss loss_;
  OptimizerFactory make_optimizer_;
  ModelPart* part_ = nullptr;
  Sequential* layers_ = nullptr;
  std::unique_ptr<LocalGpt> gpt_;       // a GPT's pieces (embedding, blocks, head with the loss)
  std::vector<Segment> segments_;
  std::vector<std::size_t> pinned_;     // trained parameters kept in memory (the GPT's tied embedding)
  std::vector<int> segment_of_module_;  // -1: a module before the first segment
  std::unique_ptr<StateStore> store_;   // the trained parameters' values, one kind
  std::unique_ptr<Optimizer> optimizer_;
  bool streaming_ = false;              // a training step moves the parameters itself
};

}  // namespace weft::parallel
