// What a pipeline stage computes with: the GPT's pieces (embedding, a range of blocks, the
// head with the loss) and its trainable parameters. The whole model on one rank
// (`LocalGpt`), or its tensor-parallel slices (`TensorParallelGpt`): pipeline stages run
// either, which is how pipeline and tensor parallelism combine in a mesh.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "weft/comm/communicator.h"
#include "weft/nn/transformer.h"

namespace weft::parallel {

class StageModel {
 public:
  virtual ~StageModel() = default;
  virtual const GptConfig& config() const = 0;
  // The whole model these pieces come from: it says where a parameter sits (GPT::part_of).
  virtual const GPT& gpt() const = 0;
  virtual Var embed(const Tensor& ids) = 0;                                     // [B, T] -> [B, T, d]
  virtual Var run_blocks(const Var& x, std::int64_t begin, std::int64_t end) = 0;
  virtual Var head_loss(const Var& x, const std::vector<std::int32_t>& targets) = 0;  // mean cross-entropy
  // The trainable parameters, by the full model's names (a shard keeps its parameter's name).
  virtual std::vector<std::pair<std::string, Var>> parameters() const = 0;
  // The share of a parameter's squared norm this rank contributes to the model's norm: 1 for
  // a shard or an unsplit model, 1/t for a parameter replicated on t tensor-parallel ranks.
  virtual double norm_share(const std::string& name) const = 0;
};

// The whole GPT in this process.
class LocalGpt : public StageModel {
 public:
  explicit LocalGpt(GPT& model) : model_(model) {}
  const GptConfig& config() const override { return model_.config(); }
  const GPT& gpt() const override { return model_; }
  Var embed(const Tensor& ids) override;
  Var run_blocks(const Var& x, std::int64_t begin, std::int64_t end) override { return model_.run_blocks(x, begin, end); }
  Var head_loss(const Var& x, const std::vector<std::int32_t>& targets) override;
  std::vector<std::pair<std::string, Var>> parameters() const override { return model_.named_parameters(); }
  double norm_share(const std::string&) const override { return 1.0; }

 private:
  GPT& model_;
};

// How much of a parameter's squared gradient norm this rank adds to the model's norm: the
// model's norm_share, and 0 for `skip` (a duplicate counted on another rank).
using NormWeight = std::function<double(const std::string& name)>;
NormWeight norm_weight(const StageModel& model, const std::string& skip = "");

// Gradient clipping by the norm of the whole model when its parameters are spread over
// ranks: each rank adds weight(name) x ||g||^2 of `params`, `group` sums those over the
// ranks holding one copy of the model. Returns the norm; scales every gradient of `params`
// when it exceeds max_norm (> 0).
double clip_grad_norm(const std::vector<std::pair<std::string, Var>>& params, const NormWeight& weight,
                      comm::Communicator* group, double max_norm);

}  // namespace weft::parallel
