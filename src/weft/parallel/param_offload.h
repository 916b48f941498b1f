// Parameter offload (seed 003 chapter 8: what does not fit goes to host memory or disk, read
// back ahead of use; ZeRO-Infinity's parameters on NVMe): a model of layers in sequence
// (nn/sequential.h) keeps its trained parameters in a file, and only a few layers' worth are
// in memory at a time. The layers are taken in segments, each a layer with parameters and
// the ones without that follow it. A step:
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
// parameters through the forward the same way (Sequential::set_around); checkpoints read
// them from the file; at the end the model gets them back in memory (what is saved).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weft/comm/communicator.h"
#include "weft/nn/sequential.h"
#include "weft/optim/state_store.h"
#include "weft/parallel/strategy.h"

namespace weft::parallel {

// The loss of a batch from the model's output (the task's: cross-entropy for classifiers).
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
  std::optional<StateDict> model_state() override;
  void finish() override;
  std::vector<std::string> intro_lines() override;

  // The bytes of parameters in memory at most (the slots'), and of all of them.
  std::int64_t resident_bytes() const { return store_->resident_bytes(); }
  std::int64_t total_bytes() const { return store_->total_bytes(); }

 private:
  struct Segment {
    std::size_t begin, end;              // modules [begin, end)
    std::vector<std::size_t> params;     // indices into the trained list (and the store)
  };
  void load(const Segment& s);
  void drop(const Segment& s, bool changed);
  std::vector<std::size_t> order(bool backward, std::size_t segments = SIZE_MAX) const;

  std::string dir_;
  std::shared_ptr<comm::Communicator> replicas_;
  OutputLoss loss_;
  OptimizerFactory make_optimizer_;
  ModelPart* part_ = nullptr;
  Sequential* layers_ = nullptr;
  std::vector<Segment> segments_;
  std::vector<int> segment_of_module_;  // -1: a module before the first segment
  std::unique_ptr<StateStore> store_;   // the trained parameters' values, one kind
  std::unique_ptr<Optimizer> optimizer_;
  bool streaming_ = false;              // a training step moves the parameters itself
};

}  // namespace weft::parallel
