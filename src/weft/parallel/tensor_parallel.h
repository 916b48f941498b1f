// Tensor (intra-layer) parallelism for the GPT, as Megatron-LM does it (Shoeybi et al. 2019;
// seed 002 chapter 8, seed 003 chapter 8), over a group of t ranks:
//
//   column-parallel Linear  each rank holds out/t rows of W (and of the bias); its input is
//                           replicated; backward all-reduces the input's gradient ("f")
//   row-parallel Linear     each rank holds in/t columns of W; its input is split; forward
//                           all-reduces the partial products ("g"); the bias is replicated
//   parallel MLP            fc column-parallel -> GELU -> out row-parallel: one all-reduce in
//                           forward, one in backward
//   parallel attention      Q, K, V column-parallel by heads (t divides the heads), attention
//                           of the rank's heads, projection row-parallel: one and one
//   vocabulary-parallel     the token embedding split by vocabulary rows (lookups outside
//   embedding and loss      the rank's rows give zeros, then an all-reduce); the tied head
//                           gives each rank its slice of the logits, and the cross-entropy
//                           combines max, sum of exponentials and target logit with three
//                           all-reduces of one number per token
//
// With `all_gather_qk`, attention follows seed 002 chapter 8 instead: each rank computes
// its feature slices of Q, K and V, all-gathers Q and K (backward: reduce-scatters their
// gradients), computes every head's scores and keeps V local: the same numbers, more traffic.
//
// The blocks are decoder_block.h's, with parallel_linear.h's products and the attention of
// the rank's heads (or, with all_gather_qk, every rank's Q and K).
//
// Every rank builds the whole model with the same seed (so the shards are slices of one
// process's parameters), then frees the full copies of the weights it shards; layer norms,
// position embeddings and the row-parallel biases stay replicated (every rank computes the
// same gradients for them).
#pragma once

#include <functional>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "weft/comm/communicator.h"
#include "weft/nn/decoder_block.h"
#include "weft/nn/transformer.h"
#include "weft/parallel/parallel_linear.h"
#include "weft/parallel/stage_model.h"
#include "weft/parallel/strategy.h"

namespace weft::parallel {

class TensorParallelGpt : public StageModel {
 public:
  TensorParallelGpt(GPT& model, std::shared_ptr<comm::Communicator> group, bool all_gather_qk = false);

  // Mean next-token cross-entropy of ids [B, T] against targets (B x T), on every rank.
  Var loss(const Tensor& ids, const std::vector<std::int32_t>& targets);
  // The pieces, for pipeline stages (StageModel).
  const GptConfig& config() const override { return model_.config(); }
  const GPT& gpt() const override { return model_; }
  Var embed(const Tensor& ids) override;
  Var run_blocks(const Var& x, std::int64_t begin, std::int64_t end) override;
  Var head_loss(const Var& x, const std::vector<std::int32_t>& targets) override;
  // The rank's shards and the replicated parameters.
  std::vector<std::pair<std::string, Var>> parameters() const override { return params_; }
  double norm_share(const std::string& name) const override;
  // Writes the full parameters into the model on every rank (the shards, broadcast). With a
  // filter, only the parameters it accepts (every rank of the group must pass the same).
  void gather_parameters(const std::function<bool(const std::string&)>& only = {});
  // Checkpoints: whether a parameter is split here; the full tensor from every rank's part of
  // it (a collective over the group, e.g. for optimizer buffers); this rank's part of a full one.
  bool is_shard(const std::string& name) const;
  Tensor full_of(const std::string& name, const Tensor& part);
  Tensor part_of(const std::string& name, const Tensor& full) const;

 private:
  struct Shard {
    std::string name;     // the full parameter's name
    Var full, part;       // the full parameter's value is freed; gather_parameters rebuilds it
    Shape full_shape;
    int dim = 0;          // 0: rows, 1: columns
    // Rank r's pieces (offset, length) along dim, concatenated.
    std::function<Pieces(int r)> pieces;
  };
  Var shard(const std::string& name, int dim, std::function<Pieces(int r)> pieces);
  const Shard& shard_named(const std::string& name) const;
  Var replicated(const std::string& name);
  Var block(const Var& x, std::int64_t layer);

  GPT& model_;
  std::shared_ptr<comm::Communicator> group_;
  bool all_gather_qk_;
  int rank_ = 0, size_ = 1;
  std::int64_t vocab_begin_ = 0, vocab_end_ = 0;
  std::vector<Shard> shards_;
  std::vector<DecoderBlockParts> blocks_;
  Var wte_part_;   // this rank's rows of the token embedding
  Var head_part_;  // and of the head's weight (wte_part_ when tied)
  DecoderEnds ends_;  // the vocabulary-parallel embedding and head
  std::vector<std::pair<std::string, Var>> params_;
  std::vector<bool> replicated_;  // per params_ entry
  std::set<std::string> replicated_names_;
  std::map<std::string, Var> by_name_;  // the whole model's parameters
};

// The strategy: the GPT's layers sliced over the mesh's tp group (`model_group`: the ranks
// of one model copy, for the gradient norm). Checkpoints widen the slices to whole tensors
// (all-gathered) and narrow a whole model's state to this rank's slices.
class TensorParallel : public Strategy {
 public:
  TensorParallel(std::shared_ptr<comm::Communicator> group, comm::Communicator* model_group, bool all_gather_qk)
      : group_(std::move(group)), model_group_(model_group), all_gather_qk_(all_gather_qk) {}
  std::string name() const override { return "tensor-parallel"; }
  bool splits_model() const override { return true; }
  void prepare(ModelPart& part) override;
  std::optional<double> forward_backward(const StepBatch& batch, const std::function<void(bool)>& update) override;
  std::optional<double> eval_loss(const StepBatch& batch) override;
  void finish() override;
  void widen(TrainState& state) override;
  void narrow(StateDict& optimizer) override;
  TensorParallelGpt& model() { return *tp_; }

 private:
  std::shared_ptr<comm::Communicator> group_;
  comm::Communicator* model_group_;
  bool all_gather_qk_;
  std::unique_ptr<TensorParallelGpt> tp_;
  const ModelPart* part_ = nullptr;
};

}  // namespace weft::parallel
