#include "weft/parallel/tensor_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "weft/autograd/functions.h"
#include "weft/autograd/sequence.h"
#include "weft/tensor/ops.h"
#include "weft/util/error.h"

namespace weft::parallel {
namespace {

using Grads = std::vector<Tensor>;
using comm::DataType;
using comm::ReduceOp;

std::int64_t part_begin(std::int64_t n, int parts, int i) { return n * i / parts; }

// "h3." (built with +=: GCC 12 warns falsely on "h" + std::to_string(i) + ".").
std::string prefix(std::int64_t layer, const char* rest = "") {
  std::string s = "h";
  s += std::to_string(layer);
  s += '.';
  s += rest;
  return s;
}

void put(Tensor& full, int dim, const std::vector<std::pair<std::int64_t, std::int64_t>>& pieces, const Tensor& part) {
  std::int64_t at = 0;
  for (auto [off, len] : pieces) {
    Tensor dst = full.slice(dim, off, off + len);
    dst.copy_(part.slice(dim, at, at + len));
    at += len;
  }
}

// The vocabulary-parallel token embedding: this rank's rows of the table (ids outside them
// give zeros), summed over the ranks; backward adds each row's gradient into this rank's rows.
class VocabParallelRows : public TokenRows {
 public:
  VocabParallelRows(Var part, std::int64_t begin, comm::Communicator& group)
      : part_(std::move(part)), begin_(begin), group_(&group) {}
  Var rows(const std::vector<std::int32_t>& ids) const override {
    const auto N = static_cast<std::int64_t>(ids.size());
    const std::int64_t vb = begin_, ve = begin_ + part_.size(0), d = part_.size(1);
    Tensor emb = Tensor::zeros({N, d});
    const Tensor w = part_.value().contiguous();
    for (std::int64_t i = 0; i < N; ++i) {
      const std::int64_t id = ids[static_cast<std::size_t>(i)];
      if (id >= vb && id < ve)
        std::copy(w.data<float>() + (id - vb) * d, w.data<float>() + (id - vb + 1) * d, emb.data<float>() + i * d);
    }
    group_->allreduce(emb.data<float>(), emb.numel(), DataType::kF32, ReduceOp::kSum)->wait();
    return record("vocab_parallel_embedding", emb, {part_}, [ids, vb, ve, d, shape = w.shape()](const Tensor& grad) {
      Tensor gw = Tensor::zeros(shape);
      const Tensor gc = grad.contiguous();
      for (std::size_t i = 0; i < ids.size(); ++i)
        if (ids[i] >= vb && ids[i] < ve)
          for (std::int64_t k = 0; k < d; ++k)
            gw.data<float>()[(ids[i] - vb) * d + k] += gc.data<float>()[static_cast<std::int64_t>(i) * d + k];
      return Grads{gw};
    });
  }

 private:
  Var part_;
  std::int64_t begin_;
  comm::Communicator* group_;
};

// The vocabulary-parallel head: this rank's rows of the head's weight (the token embedding's
// when tied) give its slice of the logits; the input is replicated, so backward all-reduces
// its gradient.
class VocabParallelHead : public BlockLinear {
 public:
  VocabParallelHead(Var part, comm::Communicator& group) : part_(std::move(part)), group_(&group) {}
  Var forward(const Var& x) const override { return matmul(tp_copy(x, *group_), transpose(part_, 0, 1)); }

 private:
  Var part_;
  comm::Communicator* group_;
};

}  // namespace

TensorParallelGpt::TensorParallelGpt(GPT& model, std::shared_ptr<comm::Communicator> group, bool all_gather_qk)
    : model_(model), group_(std::move(group)), all_gather_qk_(all_gather_qk) {
  size_ = group_ ? group_->size() : 1;
  rank_ = group_ ? group_->rank() : 0;
  if (!group_) throw InternalError("tensor parallelism needs a communicator");
  const GptConfig& c = model_.config();
  const BlockConfig block = c.block();
  const int t = size_, r = rank_;
  if (c.heads % t != 0 || block.key_value_heads() % t != 0)
    throw ConfigError(std::to_string(t) + " tensor-parallel ranks do not divide the " + std::to_string(c.heads) +
                      " attention heads" +
                      (block.key_value_heads() != c.heads
                           ? " and the " + std::to_string(block.key_value_heads()) + " key-value heads"
                           : std::string()));
  if (all_gather_qk_ && (block.key_value_heads() != c.heads || c.window > 0))
    throw ConfigError("seed attention (all-gathered Q and K) needs as many key-value heads as heads and no window");
  for (auto& [name, p] : model_.named_parameters()) by_name_[name] = p;
  const bool norm_bias = c.norm == Norm::kLayer;
  for (std::int64_t i = 0; i < c.layers; ++i) {
    const std::string h = prefix(i);
    DecoderBlockParts& b = blocks_.emplace_back();
    b.ln1_weight = replicated(h + "ln1.weight");
    if (norm_bias) b.ln1_bias = replicated(h + "ln1.bias");
    for (Product p : kProducts) {  // (in the model's order: the MLP's norm before its products)
      if (p == Product::kFc) {
        b.ln2_weight = replicated(h + "ln2.weight");
        if (norm_bias) b.ln2_bias = replicated(h + "ln2.bias");
      }
      const std::string name = h + product_name(p);
      const Slicing s = product_slicing(p);
      const int dim = sliced_dim(s);
      auto pieces = [parts = product_parts(p, block), t](int rank) { return slice_pieces(parts, rank, t); };
      pieces(0);  // (a ConfigError here, where a product does not split, before anything is cut)
      Var w = shard(name + ".weight", dim, pieces);
      Var bias;
      if (has_bias(p, block)) bias = slices_bias(s) ? shard(name + ".bias", 0, pieces) : replicated(name + ".bias");
      b.products[static_cast<std::size_t>(p)] =
          s == Slicing::kInputs ? std::shared_ptr<const BlockLinear>(std::make_shared<RowParallelLinear>(w, bias, *group_))
                                : std::make_shared<ColumnParallelLinear>(w, bias, *group_);
    }
  }
  const std::int64_t V = c.vocab;
  vocab_begin_ = part_begin(V, t, r);
  vocab_end_ = part_begin(V, t, r + 1);
  auto vocabulary_rows = [V, t](int rank) {
    return Pieces{{part_begin(V, t, rank), part_begin(V, t, rank + 1) - part_begin(V, t, rank)}};
  };
  wte_part_ = shard(GPT::tied_weight(), 0, vocabulary_rows);
  Var positions;  // (none under rotary embeddings)
  if (by_name_.count("wpe.weight")) positions = replicated("wpe.weight");
  else if (c.positional != Positional::kRotary) positions = Var(sinusoidal_encoding(c.context, c.dim, c.positional));
  const Var final_weight = replicated("ln_f.weight");
  const Var final_bias = norm_bias ? replicated("ln_f.bias") : Var();
  head_part_ = c.tied_head ? wte_part_ : shard(model_.head_weight(), 0, vocabulary_rows);
  ends_ = {std::make_shared<VocabParallelRows>(wte_part_, vocab_begin_, *group_), positions, final_weight, final_bias,
           std::make_shared<VocabParallelHead>(head_part_, *group_)};
}

Var TensorParallelGpt::shard(const std::string& name, int dim, std::function<Pieces(int r)> pieces) {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) throw InternalError("tensor parallelism: no parameter " + name);
  Var part(take_pieces(it->second.value(), dim, pieces(rank_)), true);
  shards_.push_back({name, it->second, part, it->second.shape(), dim, std::move(pieces)});
  Var full = it->second;
  full.mutable_value() = Tensor();  // this rank keeps its slice only
  params_.push_back({name, part});
  replicated_.push_back(false);
  return part;
}

Var TensorParallelGpt::replicated(const std::string& name) {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) throw InternalError("tensor parallelism: no parameter " + name);
  params_.push_back({name, it->second});
  replicated_.push_back(true);
  replicated_names_.insert(name);
  return it->second;
}

namespace {
// Seed 002 chapter 8's attention: every rank's slice of Q and K gathered, the scores of all
// heads computed, those of this rank's heads kept (V stays local): the same numbers as the
// rank's own heads' attention, more traffic.
class GatheredQkAttention : public BlockAttention {
 public:
  GatheredQkAttention(std::int64_t batch, std::int64_t length, std::int64_t heads, comm::Communicator& group)
      : BlockAttention(heads / group.size(), heads / group.size()), batch_(batch), length_(length), heads_(heads),
        group_(&group), local_(batch, length, heads / group.size()) {}
  std::vector<std::int32_t> positions(std::int64_t rows) const override { return local_.positions(rows); }
  Var attend(const Var& qkv, std::int64_t) const override {
    const std::int64_t B = batch_, T = length_, H = heads_, t = group_->size(), Hl = H / t, w = qkv.size(1) / 3;
    Var rows = reshape(qkv, {B, T, 3 * w});
    Var q = narrow(rows, 2, 0, w), k = narrow(rows, 2, w, w), v = split_heads(narrow(rows, 2, 2 * w, w), Hl);
    Var all = causal_attention_weights(split_heads(tp_gather_last(q, *group_), H),
                                       split_heads(tp_gather_last(k, *group_), H));  // [B*H, T, T]
    Var probs = reshape(narrow(reshape(all, {B, H, T, T}), 1, group_->rank() * Hl, Hl), {B * Hl, T, T});
    return merge_heads(matmul(probs, v), B);  // [B*T, w]
  }

 private:
  std::int64_t batch_, length_, heads_;
  comm::Communicator* group_;
  CausalAttention local_;  // (the rows' positions)
};
}  // namespace

Var TensorParallelGpt::block(const Var& x, std::int64_t layer) {
  const GptConfig& c = model_.config();
  const std::int64_t B = x.size(0), T = x.size(1), d = c.dim;
  const Var rows = reshape(x, {B * T, d});
  const auto& parts = blocks_[static_cast<std::size_t>(layer)];
  const BlockConfig block = c.block();
  const Var y = all_gather_qk_
                    ? decoder_block(rows, parts, GatheredQkAttention(B, T, c.heads, *group_), layer, block)
                    : decoder_block(rows, parts,
                                    CausalAttention(B, T, c.heads / size_, block.key_value_heads() / size_, c.window),
                                    layer, block);
  return reshape(y, {B, T, d});
}

Var TensorParallelGpt::loss(const Tensor& ids, const std::vector<std::int32_t>& targets) {
  return head_loss(run_blocks(embed(ids), 0, model_.config().layers), targets);
}

Var TensorParallelGpt::run_blocks(const Var& x, std::int64_t begin, std::int64_t end) {
  return run_block_range(x, begin, end, model_.config().recompute,
                         [this](const Var& v, std::int64_t i) { return block(v, i); });
}

Var TensorParallelGpt::embed(const Tensor& ids) {
  const std::int64_t B = ids.size(0), T = ids.size(1);
  return reshape(decoder_embed(token_ids_of(ids), sequence_positions(B, T), ends_), {B, T, model_.config().dim});
}

Var TensorParallelGpt::head_loss(const Var& x, const std::vector<std::int32_t>& targets) {
  const std::int64_t B = x.size(0), T = x.size(1), d = model_.config().dim, N = B * T;
  const std::int64_t vb = vocab_begin_, ve = vocab_end_, Vl = ve - vb;
  comm::Communicator* g = group_.get();
  const GptConfig& c = model_.config();
  const Var logits = decoder_head(reshape(x, {N, d}), ends_, c.block());  // this rank's slice, [N, Vl]
  // Vocabulary-parallel cross-entropy: max, sum of exponentials and target logit per token,
  // each summed (or maxed) over the ranks.
  Tensor z = logits.value().contiguous();
  std::vector<float> m(static_cast<std::size_t>(N), -std::numeric_limits<float>::infinity());
  for (std::int64_t i = 0; i < N; ++i)
    for (std::int64_t j = 0; j < Vl; ++j) m[i] = std::max(m[i], z.data<float>()[i * Vl + j]);
  g->allreduce(m.data(), N, DataType::kF32, ReduceOp::kMax)->wait();
  Tensor e = Tensor::zeros({N, Vl});
  std::vector<double> s(static_cast<std::size_t>(N), 0.0), target(static_cast<std::size_t>(N), 0.0);
  for (std::int64_t i = 0; i < N; ++i) {
    for (std::int64_t j = 0; j < Vl; ++j) {
      float v = std::exp(z.data<float>()[i * Vl + j] - m[i]);
      e.data<float>()[i * Vl + j] = v;
      s[i] += v;
    }
    std::int64_t tg = targets[static_cast<std::size_t>(i)];
    if (tg >= vb && tg < ve) target[i] = static_cast<double>(z.data<float>()[i * Vl + (tg - vb)]);
  }
  g->allreduce(s.data(), N, DataType::kF64, ReduceOp::kSum)->wait();
  g->allreduce(target.data(), N, DataType::kF64, ReduceOp::kSum)->wait();
  double total = 0;
  for (std::int64_t i = 0; i < N; ++i) total += std::log(s[i]) + static_cast<double>(m[i]) - target[i];
  total /= static_cast<double>(N);
  SavedTensor saved = SavedTensor::activation(e);
  return record("vocab_parallel_cross_entropy", Tensor::scalar(total), {logits},
                [saved, s, targets, vb, ve, Vl, N](const Tensor& grad) {
                  // d loss / d logits = (softmax - onehot) / N, on this rank's columns.
                  Tensor dz = saved.get().clone();
                  float* p = dz.data<float>();
                  const float scale = static_cast<float>(grad.item() / static_cast<double>(N));
                  for (std::int64_t i = 0; i < N; ++i) {
                    float inv = static_cast<float>(1.0 / s[i]);
                    for (std::int64_t j = 0; j < Vl; ++j) p[i * Vl + j] *= inv;
                    std::int64_t tg = targets[static_cast<std::size_t>(i)];
                    if (tg >= vb && tg < ve) p[i * Vl + (tg - vb)] -= 1.0f;
                    for (std::int64_t j = 0; j < Vl; ++j) p[i * Vl + j] *= scale;
                  }
                  return Grads{dz};
                });
}

double TensorParallelGpt::norm_share(const std::string& name) const {
  return replicated_names_.count(name) ? 1.0 / size_ : 1.0;
}

const TensorParallelGpt::Shard& TensorParallelGpt::shard_named(const std::string& name) const {
  for (const Shard& sh : shards_)
    if (sh.name == name) return sh;
  throw InternalError("tensor parallelism: " + name + " is not split");
}

bool TensorParallelGpt::is_shard(const std::string& name) const {
  for (const Shard& sh : shards_)
    if (sh.name == name) return true;
  return false;
}

Tensor TensorParallelGpt::full_of(const std::string& name, const Tensor& mine) {
  const Shard& sh = shard_named(name);
  Tensor full = Tensor::zeros(sh.full_shape);
  for (int r = 0; r < size_; ++r) {
    const Pieces pieces = sh.pieces(r);
    Shape shape = sh.full_shape;
    std::int64_t len = 0;
    for (auto [o, l] : pieces) len += l;
    shape[static_cast<std::size_t>(sh.dim)] = len;
    Tensor part = r == rank_ ? mine.contiguous().clone() : Tensor::zeros(shape);
    group_->broadcast(part.data<float>(), part.numel(), DataType::kF32, r)->wait();
    put(full, sh.dim, pieces, part);
  }
  return full;
}

Tensor TensorParallelGpt::part_of(const std::string& name, const Tensor& full) const {
  const Shard& sh = shard_named(name);
  return take_pieces(full, sh.dim, sh.pieces(rank_));
}

void TensorParallelGpt::gather_parameters(const std::function<bool(const std::string&)>& only) {
  for (Shard& sh : shards_) {
    if (only && !only(sh.name)) continue;
    sh.full.mutable_value() = full_of(sh.name, sh.part.value());
  }
}

namespace {
// The parameter an entry of a state belongs to: the entry's name ("h0.attn.weight"), or
// for an optimizer buffer the part after "<buffer>.".
std::string parameter_of(const std::string& key, bool optimizer) {
  return optimizer ? key.substr(key.find('.') + 1) : key;
}
}  // namespace

void TensorParallel::prepare(ModelPart& part) {
  auto* gpt = dynamic_cast<GPT*>(&part.model);
  if (!gpt) throw ConfigError("tensor parallelism needs a GPT");
  tp_ = std::make_unique<TensorParallelGpt>(*gpt, group_, all_gather_qk_);
  part.stage = tp_.get();
  part.trained = tp_->parameters();
  part.norm_weight = norm_weight(*tp_);
  part.model_group = model_group_;
  part_ = &part;
}

std::optional<double> TensorParallel::forward_backward(const StepBatch& batch, const std::function<void(bool)>& update) {
  const auto t0 = std::chrono::steady_clock::now();
  Var loss = tp_->loss(batch.inputs, batch.targets);
  const auto t1 = std::chrono::steady_clock::now();
  (batch.weight == 1 ? loss : mul(loss, batch.weight)).backward();
  record_span("forward", "compute", 0, t0, t1);
  record_span("backward", "compute", 0, t1);
  update(false);
  return loss.item();
}

std::optional<double> TensorParallel::eval_loss(const StepBatch& batch) {
  return tp_->loss(batch.inputs, batch.targets).item();
}

void TensorParallel::finish() { tp_->gather_parameters(part_->holds); }

void TensorParallel::widen(TrainState& state) {
  for (auto* dict : {&state.model, &state.optimizer}) {
    for (auto& [key, t] : *dict) {
      const std::string name = parameter_of(key, dict == &state.optimizer);
      if (tp_->is_shard(name)) t = tp_->full_of(name, t);
    }
  }
}

void TensorParallel::narrow(StateDict& optimizer) {
  for (auto& [key, t] : optimizer) {
    const std::string name = parameter_of(key, true);
    if (tp_->is_shard(name)) t = tp_->part_of(name, t);
  }
}

}  // namespace weft::parallel
