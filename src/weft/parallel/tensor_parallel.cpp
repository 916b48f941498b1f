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

// Copies the pieces (offset, length) along `dim` (0 or 1) of a 1-D or 2-D tensor, concatenated.
Tensor take(const Tensor& full, int dim, const std::vector<std::pair<std::int64_t, std::int64_t>>& pieces) {
  std::vector<Tensor> parts;
  for (auto [off, len] : pieces) parts.push_back(full.slice(dim, off, off + len).contiguous());
  if (parts.size() == 1) return parts[0].clone();
  Shape shape = full.shape();
  std::int64_t total = 0;
  for (auto [off, len] : pieces) total += len;
  shape[static_cast<std::size_t>(dim)] = total;
  Tensor out = Tensor::zeros(shape, full.dtype());
  std::int64_t at = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    Tensor dst = out.slice(dim, at, at + pieces[i].second);
    dst.copy_(parts[i]);
    at += pieces[i].second;
  }
  return out;
}

void put(Tensor& full, int dim, const std::vector<std::pair<std::int64_t, std::int64_t>>& pieces, const Tensor& part) {
  std::int64_t at = 0;
  for (auto [off, len] : pieces) {
    Tensor dst = full.slice(dim, off, off + len);
    dst.copy_(part.slice(dim, at, at + len));
    at += len;
  }
}

}  // namespace

Var tp_copy(const Var& x, comm::Communicator& group) {
  comm::Communicator* g = &group;
  return record("tp_copy", x.value(), {x}, [g](const Tensor& grad) {
    Tensor c = grad.contiguous().clone();
    const auto t0 = std::chrono::steady_clock::now();
    g->allreduce(c.data<float>(), c.numel(), DataType::kF32, ReduceOp::kSum)->wait();
    record_span("tp all-reduce (backward)", "comm", 1, t0);
    return Grads{c};
  });
}

Var tp_reduce(const Var& x, comm::Communicator& group) {
  Tensor c = x.value().contiguous().clone();
  const auto t0 = std::chrono::steady_clock::now();
  group.allreduce(c.data<float>(), c.numel(), DataType::kF32, ReduceOp::kSum)->wait();
  record_span("tp all-reduce (forward)", "comm", 1, t0);
  return record("tp_reduce", c, {x}, [](const Tensor& grad) { return Grads{grad}; });
}

Var tp_gather_last(const Var& x, comm::Communicator& group) {
  const Tensor xc = x.value().contiguous();
  const std::int64_t n = xc.size(-1), rows = xc.numel() / std::max<std::int64_t>(n, 1), t = group.size();
  Tensor blocks = Tensor::zeros({t, rows, n});
  const auto t0 = std::chrono::steady_clock::now();
  group.allgather(xc.data<float>(), blocks.data<float>(), xc.numel(), DataType::kF32)->wait();
  record_span("tp all-gather (forward)", "comm", 1, t0);
  Shape shape = xc.shape();
  shape.back() = n * t;
  Tensor out = blocks.permute({1, 0, 2}).contiguous().view(shape);
  comm::Communicator* g = &group;
  return record("tp_gather_last", out, {x}, [g, rows, n, t, xs = xc.shape()](const Tensor& grad) {
    // Each rank's columns, summed over the ranks that used them: a reduce-scatter.
    Tensor blocks_grad = grad.contiguous().view({rows, t, n}).permute({1, 0, 2}).contiguous();
    Tensor mine = Tensor::zeros({rows, n});
    const auto started = std::chrono::steady_clock::now();
    g->reduce_scatter(blocks_grad.data<float>(), mine.data<float>(), rows * n, DataType::kF32, ReduceOp::kSum)->wait();
    record_span("tp reduce-scatter (backward)", "comm", 1, started);
    return Grads{mine.view(xs)};
  });
}

TensorParallelGpt::TensorParallelGpt(GPT& model, std::shared_ptr<comm::Communicator> group, bool all_gather_qk)
    : model_(model), group_(std::move(group)), all_gather_qk_(all_gather_qk) {
  size_ = group_ ? group_->size() : 1;
  rank_ = group_ ? group_->rank() : 0;
  if (!group_) throw InternalError("tensor parallelism needs a communicator");
  const GptConfig& c = model_.config();
  const int t = size_, r = rank_;
  if (c.heads % t != 0)
    throw ConfigError(std::to_string(t) + " tensor-parallel ranks do not divide the " + std::to_string(c.heads) +
                      " attention heads");
  for (auto& [name, p] : model_.named_parameters()) by_name_[name] = p;
  const std::int64_t d = c.dim, dl = d / t, fl = 4 * d / t;
  for (std::int64_t i = 0; i < c.layers; ++i) {
    const std::string h = prefix(i);
    replicated(h + "ln1.weight");
    replicated(h + "ln1.bias");
    std::vector<std::pair<std::int64_t, std::int64_t>> qkv{{r * dl, dl}, {d + r * dl, dl}, {2 * d + r * dl, dl}};
    shard(h + "attn.qkv.weight", 0, qkv);
    shard(h + "attn.qkv.bias", 0, qkv);
    shard(h + "attn.proj.weight", 1, {{r * dl, dl}});
    replicated(h + "attn.proj.bias");
    replicated(h + "ln2.weight");
    replicated(h + "ln2.bias");
    shard(h + "fc.weight", 0, {{r * fl, fl}});
    shard(h + "fc.bias", 0, {{r * fl, fl}});
    shard(h + "out.weight", 1, {{r * fl, fl}});
    replicated(h + "out.bias");
  }
  vocab_begin_ = part_begin(c.vocab, t, r);
  vocab_end_ = part_begin(c.vocab, t, r + 1);
  shard(GPT::tied_weight(), 0, {{vocab_begin_, vocab_end_ - vocab_begin_}});
  if (by_name_.count("wpe.weight")) replicated("wpe.weight");
  else fixed_positions_ = sinusoidal_encoding(c.context, d, c.positional);
  replicated("ln_f.weight");
  replicated("ln_f.bias");
}

Var TensorParallelGpt::shard(const std::string& name, int dim, std::vector<std::pair<std::int64_t, std::int64_t>> pieces) {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) throw InternalError("tensor parallelism: no parameter " + name);
  Var part(take(it->second.value(), dim, pieces), true);
  shards_.push_back({name, it->second, part, it->second.shape(), dim, std::move(pieces)});
  Var full = it->second;
  full.mutable_value() = Tensor();  // this rank keeps its slice only
  params_.push_back({name, part});
  replicated_.push_back(false);
  by_name_[name + "#shard"] = part;
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

Var TensorParallelGpt::attention(const Var& x, std::int64_t layer) {
  const GptConfig& c = model_.config();
  const std::string h = prefix(layer, "attn.");
  const std::int64_t B = x.size(0), T = x.size(1), d = c.dim, t = size_, dl = d / t, H = c.heads, Hl = H / t;
  Var a = tp_copy(x, *group_);
  Var qkv = reshape(linear(reshape(a, {B * T, d}), by_name_[h + "qkv.weight#shard"], by_name_[h + "qkv.bias#shard"]),
                    {B, T, 3 * dl});
  Var q = narrow(qkv, 2, 0, dl), k = narrow(qkv, 2, dl, dl), v = split_heads(narrow(qkv, 2, 2 * dl, dl), Hl);
  Var probs;
  if (all_gather_qk_) {
    // Seed 002 chapter 8: gather every rank's slice of Q and K, score all heads, keep V local.
    Var all = causal_attention_weights(split_heads(tp_gather_last(q, *group_), H),
                                       split_heads(tp_gather_last(k, *group_), H));  // [B*H, T, T]
    probs = reshape(narrow(reshape(all, {B, H, T, T}), 1, rank_ * Hl, Hl), {B * Hl, T, T});
  } else {
    probs = causal_attention_weights(split_heads(q, Hl), split_heads(k, Hl));
  }
  Var att = matmul(probs, v);  // [B*Hl, T, hd]
  Var y = tp_reduce(linear(merge_heads(att, B), by_name_[h + "proj.weight#shard"], Var()), *group_);
  return add(reshape(y, {B, T, d}), by_name_[h + "proj.bias"]);
}

Var TensorParallelGpt::mlp(const Var& x, std::int64_t layer) {
  const std::string h = prefix(layer);
  const std::int64_t B = x.size(0), T = x.size(1), d = model_.config().dim;
  Var b = tp_copy(x, *group_);
  Var hidden = gelu(linear(reshape(b, {B * T, d}), by_name_[h + "fc.weight#shard"], by_name_[h + "fc.bias#shard"]));
  Var y = tp_reduce(linear(hidden, by_name_[h + "out.weight#shard"], Var()), *group_);
  return add(reshape(y, {B, T, d}), by_name_[h + "out.bias"]);
}

Var TensorParallelGpt::block(const Var& x, std::int64_t layer) {
  const std::string h = prefix(layer);
  auto ln = [&](const Var& v, const char* which) {
    return layer_norm(v, by_name_[h + which + ".weight"], by_name_[h + which + ".bias"]);
  };
  if (model_.config().pre_ln) {
    Var a = add(x, attention(ln(x, "ln1"), layer));
    return add(a, mlp(ln(a, "ln2"), layer));
  }
  Var a = ln(add(x, attention(x, layer)), "ln1");
  return ln(add(a, mlp(a, layer)), "ln2");
}

Var TensorParallelGpt::loss(const Tensor& ids, const std::vector<std::int32_t>& targets) {
  return head_loss(run_blocks(embed(ids), 0, model_.config().layers), targets);
}

Var TensorParallelGpt::run_blocks(const Var& x, std::int64_t begin, std::int64_t end) {
  Var h = x;
  for (std::int64_t i = begin; i < end; ++i)
    h = model_.config().recompute ? checkpoint([this, i](const Var& v) { return block(v, i); }, h) : block(h, i);
  return h;
}

Var TensorParallelGpt::embed(const Tensor& ids) {
  const GptConfig& c = model_.config();
  const std::int64_t B = ids.size(0), T = ids.size(1), d = c.dim, N = B * T;
  const std::int64_t vb = vocab_begin_, ve = vocab_end_;
  comm::Communicator* g = group_.get();
  // Vocabulary-parallel embedding: this rank's rows, zeros elsewhere, summed over the ranks.
  std::vector<std::int32_t> tok(static_cast<std::size_t>(N));
  {
    Tensor ic = ids.contiguous();
    for (std::int64_t i = 0; i < N; ++i) tok[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(ic.data<float>()[i]);
  }
  Var wte = by_name_["wte.weight#shard"];
  Tensor emb = Tensor::zeros({N, d});
  {
    Tensor w = wte.value().contiguous();
    for (std::int64_t i = 0; i < N; ++i) {
      std::int64_t id = tok[static_cast<std::size_t>(i)];
      if (id >= vb && id < ve) std::copy(w.data<float>() + (id - vb) * d, w.data<float>() + (id - vb + 1) * d, emb.data<float>() + i * d);
    }
    g->allreduce(emb.data<float>(), emb.numel(), DataType::kF32, ReduceOp::kSum)->wait();
  }
  Var x = record("vocab_parallel_embedding", emb, {wte}, [tok, vb, ve, d, shape = wte.shape()](const Tensor& grad) {
    Tensor gw = Tensor::zeros(shape);
    Tensor gc = grad.contiguous();
    for (std::size_t i = 0; i < tok.size(); ++i)
      if (tok[i] >= vb && tok[i] < ve)
        for (std::int64_t k = 0; k < d; ++k) gw.data<float>()[(tok[i] - vb) * d + k] += gc.data<float>()[static_cast<std::int64_t>(i) * d + k];
    return Grads{gw};
  });
  x = reshape(x, {B, T, d});
  if (by_name_.count("wpe.weight")) {
    std::vector<std::int32_t> pos(static_cast<std::size_t>(T));
    for (std::int64_t i = 0; i < T; ++i) pos[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i);
    x = add(x, reshape(embedding(by_name_["wpe.weight"], pos), {1, T, d}));
  } else {
    x = add(x, Var(fixed_positions_.slice(0, 0, T).contiguous()));
  }
  return x;
}

Var TensorParallelGpt::head_loss(const Var& x, const std::vector<std::int32_t>& targets) {
  const std::int64_t B = x.size(0), T = x.size(1), d = model_.config().dim, N = B * T;
  const std::int64_t vb = vocab_begin_, ve = vocab_end_, Vl = ve - vb;
  comm::Communicator* g = group_.get();
  Var wte = by_name_["wte.weight#shard"];
  Var hfin = layer_norm(x, by_name_["ln_f.weight"], by_name_["ln_f.bias"]);
  // The tied head: this rank's slice of the logits, [N, Vl].
  Var logits = matmul(reshape(tp_copy(hfin, *group_), {N, d}), transpose(wte, 0, 1));
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

// Rank r's pieces of a split parameter, computed the way the constructor cut them.
std::vector<std::pair<std::int64_t, std::int64_t>> TensorParallelGpt::pieces_of(const Shard& sh, int r) const {
  const GptConfig& c = model_.config();
  const std::int64_t d = c.dim, dl = d / size_, fl = 4 * d / size_;
  if (sh.name == GPT::tied_weight()) {
    std::int64_t b = part_begin(c.vocab, size_, r), e = part_begin(c.vocab, size_, r + 1);
    return {{b, e - b}};
  }
  if (sh.name.find("qkv") != std::string::npos) return {{r * dl, dl}, {d + r * dl, dl}, {2 * d + r * dl, dl}};
  if (sh.name.find("proj") != std::string::npos) return {{r * dl, dl}};
  return {{r * fl, fl}};
}

Tensor TensorParallelGpt::full_of(const std::string& name, const Tensor& mine) {
  const Shard& sh = shard_named(name);
  Tensor full = Tensor::zeros(sh.full_shape);
  for (int r = 0; r < size_; ++r) {
    const auto pieces = pieces_of(sh, r);
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
  return take(full, sh.dim, pieces_of(sh, rank_));
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
