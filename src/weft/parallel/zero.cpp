#include <nlohmann/json.hpp>

#include "weft/parallel/zero.h"
#include "weft/util/units.h"

#include <fmt/format.h>

#include <cmath>

#include "weft/tensor/ops.h"

#include <map>

#include "weft/parallel/ddp.h"
#include "weft/tensor/allocator.h"
#include "weft/util/dispatch.h"
#include "weft/util/error.h"

namespace weft::parallel {

using Clock = std::chrono::steady_clock;

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(Module& model, std::shared_ptr<comm::Communicator> comm, int stage,
                                                 const OptimizerFactory& make_optimizer,
                                                 const std::vector<std::string>& layers)
    : ZeroRedundancyOptimizer(model.named_parameters(), std::move(comm), stage, make_optimizer, layers) {}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(const std::vector<std::pair<std::string, Var>>& params,
                                                 std::shared_ptr<comm::Communicator> comm, int stage,
                                                 const OptimizerFactory& make_optimizer,
                                                 const std::vector<std::string>& layers)
    : comm_(std::move(comm)), stage_(stage) {
  if (stage < 1 || stage > 3) throw ConfigError("the ZeRO stage must be 1, 2 or 3, got " + std::to_string(stage));
  if (comm_) {
    rank_ = comm_->rank();
    world_ = comm_->size();
  }
  for (auto& [name, p] : params) {
    names_.push_back(name);
    params_.push_back(p);
  }
  if (params_.empty()) throw ConfigError("ZeRO: the model has no parameters");
  const DType dtype = params_.front().dtype();
  for (const Var& p : params_) {
    if (p.dtype() != dtype) throw ConfigError("ZeRO needs every parameter in one dtype");
    shapes_.push_back(p.shape());
    elements_ += p.value().numel();
  }

  // The units: outside the layers (everything without layers), then each layer.
  layered_ = stage_ >= 2 && !layers.empty();
  units_.resize(layered_ ? 1 + layers.size() : 1);
  for (std::size_t k = 0; k < params_.size(); ++k) {
    std::size_t u = 0;
    for (std::size_t j = 0; layered_ && j < layers.size() && u == 0; ++j)
      if (names_[k].rfind(layers[j], 0) == 0) u = 1 + j;
    units_[u].params.push_back(k);
  }
  // (Stage 3 gathers a layer when backward leaves the one after it: each needs parameters.
  // Under stage 2 a layer without trained parameters, all frozen say, is an empty unit.)
  for (std::size_t j = 0; layered_ && stage_ == 3 && j < layers.size(); ++j)
    if (units_[1 + j].params.empty()) throw ConfigError("ZeRO: no parameters under the layer prefix '" + layers[j] + "'");
  offsets_.resize(params_.size());
  for (Unit& u : units_) {
    std::int64_t n = 0;
    for (std::size_t k : u.params) {
      offsets_[k] = padded_ + n;
      n += shape_numel(shapes_[k]);
    }
    u.begin = padded_;
    u.piece = (n + world_ - 1) / world_;
    u.shard_offset = shard_elements_;
    u.pending = static_cast<int>(u.params.size());
    padded_ += u.piece * world_;
    shard_elements_ += u.piece;
  }

  // Each parameter into the flat buffer, its own tensor given back to the system at once:
  // the set-up holds the parameters once, not twice (its peak had been the run's).
  Tensor flat = Tensor::zeros({padded_}, dtype);
  for (std::size_t k = 0; k < params_.size(); ++k) {
    Tensor at = flat.slice(0, offsets_[k], offsets_[k] + shape_numel(shapes_[k])).view(shapes_[k]);
    at.copy_(params_[k].value());
    const bool large = params_[k].value().nbytes() >= (std::size_t{1} << 20);
    params_[k].mutable_value() = stage_ == 3 ? Tensor::empty({0}, dtype) : at;
    if (large) allocator_release_cache();
  }
  if (comm_) comm_->broadcast(flat.raw_data(), padded_, comm_dtype(flat), 0)->wait();  // replicas start equal

  if (stage_ == 3) {
    shard_ = Var(shard_of(flat, rank_), true);  // the only copy kept between steps
    // The model's own full parameters go: no unit is gathered yet.
    for (Var& p : params_) p.mutable_value() = Tensor::empty({0}, dtype);
  } else if (units_.size() == 1) {
    point_at(units_[0], flat);
    // One unit: the shard is a view, and the optimizer updates the full buffer in place.
    shard_ = Var(flat.slice(0, rank_ * shard_elements_, (rank_ + 1) * shard_elements_), true);
  } else {
    // Stage 2 by layers: the full parameters stay (each unit a view of the one buffer);
    // the shard is this rank's piece of every unit, all-gathered back after the update.
    for (Unit& u : units_) point_at(u, flat.slice(0, u.begin, u.begin + u.piece * world_));
    shard_ = Var(shard_of(flat, rank_), true);
  }
  optimizer_ = make_optimizer({{"shard", shard_}});
  // Layer by layer, backward reduce-scatters a layer's gradients as soon as they are final,
  // and the full gradients of that layer go: a rank never holds every full gradient at once.
  for (std::size_t u = 1; layered_ && u < units_.size(); ++u)
    for (std::size_t k : units_[u].params)
      params_[k].set_grad_ready_hook([this, u] {
        if (--units_[u].pending == 0) layer_gradients_ready(u);
      });
}

Tensor ZeroRedundancyOptimizer::shard_of(const Tensor& full, int rank) const {
  Tensor out = Tensor::empty({shard_elements_}, full.dtype());
  for (const Unit& u : units_) {
    const std::int64_t from = u.begin + rank * u.piece;
    out.slice(0, u.shard_offset, u.shard_offset + u.piece).copy_(full.slice(0, from, from + u.piece));
  }
  return out;
}

Tensor ZeroRedundancyOptimizer::full_of(const Tensor& by_rank) const {
  Tensor full = Tensor::zeros({padded_}, by_rank.dtype());
  for (int r = 0; r < world_; ++r) {
    for (const Unit& u : units_) {
      const std::int64_t from = r * shard_elements_ + u.shard_offset, to = u.begin + r * u.piece;
      full.slice(0, to, to + u.piece).copy_(by_rank.slice(0, from, from + u.piece));
    }
  }
  return full;
}

ZeroRedundancyOptimizer::State ZeroRedundancyOptimizer::gather_state() {
  State out;
  out.per_rank.resize(static_cast<std::size_t>(world_));
  // Each optimizer buffer ("exp_avg.shard", ...) is one shard: all-gather it, put the pieces
  // in the full layout, then cut that into the parameters.
  for (const auto& [key, shard] : optimizer_->state()) {
    const std::string prefix = key.substr(0, key.rfind('.'));
    Tensor by_rank = Tensor::zeros({shard_elements_ * world_}, shard.dtype());
    Tensor mine = shard.contiguous();
    if (comm_ && world_ > 1) comm_->allgather(mine.raw_data(), by_rank.raw_data(), shard_elements_, comm_dtype(by_rank))->wait();
    else by_rank.copy_(mine);
    for (int r = 0; r < world_; ++r)
      out.per_rank[static_cast<std::size_t>(r)].emplace_back(
          key, by_rank.slice(0, r * shard_elements_, (r + 1) * shard_elements_).clone());
    Tensor full = full_of(by_rank);
    for (std::size_t k = 0; k < params_.size(); ++k) {
      const std::int64_t n = shape_numel(shapes_[k]);
      out.consolidated.emplace_back(prefix + "." + names_[k], full.slice(0, offsets_[k], offsets_[k] + n).view(shapes_[k]).clone());
    }
  }
  return out;
}

void ZeroRedundancyOptimizer::load_state(const StateDict& consolidated) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : consolidated) by_name[name] = &t;
  StateDict mine;
  for (const auto& [key, shard] : optimizer_->state()) {
    const std::string prefix = key.substr(0, key.rfind('.'));
    Tensor full = Tensor::zeros({padded_}, shard.dtype());
    for (std::size_t k = 0; k < params_.size(); ++k) {
      auto it = by_name.find(prefix + "." + names_[k]);
      if (it == by_name.end()) throw CheckpointError("optimizer state has no entry '" + prefix + "." + names_[k] + "'");
      const std::int64_t n = shape_numel(shapes_[k]);
      if (it->second->numel() != n)
        throw CheckpointError("optimizer state '" + prefix + "." + names_[k] + "' has the wrong size");
      full.slice(0, offsets_[k], offsets_[k] + n).view(shapes_[k]).copy_(*it->second);
    }
    mine.emplace_back(key, shard_of(full, rank_));
  }
  optimizer_->load_state(mine);
}

void ZeroRedundancyOptimizer::point_at(Unit& u, Tensor full) {
  u.full = std::move(full);
  for (std::size_t k : u.params) {
    const std::int64_t at = offsets_[k] - u.begin;
    params_[k].mutable_value() = u.full.slice(0, at, at + shape_numel(shapes_[k])).view(shapes_[k]);
  }
}

Tensor ZeroRedundancyOptimizer::take_gradients(const Unit& u) {
  Tensor grads = Tensor::zeros({u.piece * world_}, shard_.dtype());  // zeros where a parameter got none
  for (std::size_t k : u.params) {
    Var p = params_[k];
    const std::int64_t at = offsets_[k] - u.begin;
    if (p.grad().defined()) grads.slice(0, at, at + shape_numel(shapes_[k])).view(shapes_[k]).copy_(p.grad());
    p.clear_grad();  // the full gradients are not kept past this point
  }
  return grads;
}

void ZeroRedundancyOptimizer::gather_unit(Unit& u, bool in_step) {
  if (u.full.defined()) return;
  Tensor full = Tensor::empty({u.piece * world_}, shard_.dtype());
  Tensor mine = shard_.value().slice(0, u.shard_offset, u.shard_offset + u.piece);
  if (comm_ && u.piece > 0) comm_->allgather(mine.raw_data(), full.raw_data(), u.piece, comm_dtype(full))->wait();
  else full.copy_(mine);
  point_at(u, full);
  gathered_bytes_ += static_cast<std::int64_t>(full.nbytes());
  if (in_step) peak_parameter_bytes_ = std::max(peak_parameter_bytes_, gathered_bytes_);
}

void ZeroRedundancyOptimizer::release_unit(Unit& u) {
  if (!u.full.defined()) return;
  gathered_bytes_ -= static_cast<std::int64_t>(u.full.nbytes());
  u.full = Tensor();
  // The parameters keep their names but no storage until they are gathered again.
  for (std::size_t k : u.params) params_[k].mutable_value() = Tensor::empty({0}, shard_.dtype());
}

void ZeroRedundancyOptimizer::reduce_unit(Unit& u) {
  if (u.reduced) return;
  if (!grad_shard_.defined()) grad_shard_ = Tensor::zeros({shard_elements_}, shard_.dtype());
  Tensor grads = take_gradients(u);
  Tensor mine = grad_shard_.slice(0, u.shard_offset, u.shard_offset + u.piece);
  if (comm_ && u.piece > 0) {
    comm_->reduce_scatter(grads.raw_data(), mine.raw_data(), u.piece, comm_dtype(grads), comm::ReduceOp::kAvg)->wait();
  } else {
    mine.copy_(grads);
  }
  u.reduced = true;
}

void ZeroRedundancyOptimizer::layer_gradients_ready(std::size_t unit) {
  const auto start = Clock::now();
  reduce_unit(units_[unit]);
  if (stage_ == 3) {
    release_unit(units_[unit]);
    // Backward goes on with the layer before: its parameters, now (units_[0] stays gathered).
    if (unit > 1) gather_unit(units_[unit - 1]);
  }
  backward_comm_ += Clock::now() - start;
}

void ZeroRedundancyOptimizer::before_layer(std::size_t i) {
  if (!layered_ || stage_ != 3) return;
  WEFT_CHECK(i + 1 < units_.size(), "ZeRO: layer index out of range");
  const auto start = Clock::now();
  gather_unit(units_[i + 1]);
  backward_comm_ += Clock::now() - start;
}

void ZeroRedundancyOptimizer::after_layer(std::size_t i) {
  if (!layered_ || stage_ != 3) return;
  WEFT_CHECK(i + 1 < units_.size(), "ZeRO: layer index out of range");
  if (grad_enabled() && i + 2 == units_.size()) return;  // backward starts with the last layer
  release_unit(units_[i + 1]);
}

std::chrono::duration<double> ZeroRedundancyOptimizer::gather() {
  if (stage_ != 3) return std::chrono::duration<double>(0);
  const auto start = Clock::now();
  gather_unit(units_[0]);  // without layers: everything
  return Clock::now() - start;
}

void ZeroRedundancyOptimizer::gather_all() {
  if (stage_ != 3) return;
  for (Unit& u : units_) gather_unit(u, false);
}

void ZeroRedundancyOptimizer::release() {
  if (stage_ != 3) return;
  for (Unit& u : units_) release_unit(u);
}

std::chrono::duration<double> ZeroRedundancyOptimizer::finish() {
  const auto start = Clock::now();
  if (stage_ == 1) {
    Tensor grads = take_gradients(units_[0]);  // one unit: the whole padded buffer
    if (comm_) comm_->allreduce(grads.raw_data(), padded_, comm_dtype(grads), comm::ReduceOp::kAvg)->wait();
    shard_.set_grad(grads.slice(0, rank_ * shard_elements_, (rank_ + 1) * shard_elements_));
  } else {
    for (Unit& u : units_) reduce_unit(u);  // those backward has not reduced already
    shard_.set_grad(grad_shard_);
    grad_shard_ = Tensor();
  }
  for (Unit& u : units_) {
    u.reduced = false;
    u.pending = static_cast<int>(u.params.size());
  }
  const auto spent = std::chrono::duration<double>(Clock::now() - start) + backward_comm_;
  backward_comm_ = std::chrono::duration<double>(0);
  return spent;
}

double ZeroRedundancyOptimizer::clip_grad_norm(double max_norm, const std::function<double(const std::string&)>& weight,
                                               comm::Communicator* model_group) {
  double sq = 0;
  if (shard_.grad().defined()) {
    const Tensor g = shard_.grad().contiguous();
    const float* d = g.data<float>();
    // Each parameter's elements in this rank's pieces, with the parameter's weight.
    for (const Unit& u : units_) {
      const std::int64_t lo = u.begin + rank_ * u.piece, hi = lo + u.piece;
      for (std::size_t k : u.params) {
        const std::int64_t b = std::max(lo, offsets_[k]), e = std::min(hi, offsets_[k] + shape_numel(shapes_[k]));
        double s = 0;
        for (std::int64_t i = b; i < e; ++i) {
          const double v = d[u.shard_offset + (i - lo)];
          s += v * v;
        }
        sq += (weight ? weight(names_[k]) : 1.0) * s;
      }
    }
  }
  if (comm_ && world_ > 1) comm_->allreduce(&sq, 1, comm::DataType::kF64, comm::ReduceOp::kSum)->wait();
  if (model_group && model_group->size() > 1) model_group->allreduce(&sq, 1, comm::DataType::kF64, comm::ReduceOp::kSum)->wait();
  const double norm = std::sqrt(sq);
  if (max_norm > 0 && norm > max_norm && shard_.grad().defined()) {
    // This step's own buffer, scaled in place (not copied), with ops::mul's arithmetic (in
    // double, then rounded): the same values as clip_grad_norm's.
    Tensor g = shard_.grad();
    const double scale = max_norm / (norm + 1e-6);
    dispatch(g.dtype(), [&](auto zero) {
      using T = decltype(zero);
      T* d = g.data<T>();
      for (std::int64_t i = 0, n = g.numel(); i < n; ++i) d[i] = static_cast<T>(d[i] * scale);
    });
  }
  return norm;
}

std::chrono::duration<double> ZeroRedundancyOptimizer::step() {
  optimizer_->step();
  // The averaged gradients are used: held to the next step's, they were a second shard of
  // gradients (stages 2, 3) or, stage 1, the whole all-reduced buffer its shard is a view of.
  shard_.clear_grad();
  if (stage_ == 3) {
    release();
    return std::chrono::duration<double>(0);
  }
  // Every rank's updated shard into every rank's full parameters (in place with one unit;
  // by layers, each unit's pieces into its part of the buffer).
  const auto start = Clock::now();
  if (units_.size() == 1) {
    Tensor& full = units_[0].full;
    if (comm_) comm_->allgather(shard_.value().raw_data(), full.raw_data(), shard_elements_, comm_dtype(full))->wait();
    return Clock::now() - start;
  }
  for (Unit& u : units_) {
    Tensor mine = shard_.value().slice(0, u.shard_offset, u.shard_offset + u.piece).contiguous();
    if (comm_ && u.piece > 0) comm_->allgather(mine.raw_data(), u.full.raw_data(), u.piece, comm_dtype(u.full))->wait();
    else u.full.copy_(mine);
  }
  return Clock::now() - start;
}

ZeroMemory ZeroRedundancyOptimizer::memory() const {
  ZeroMemory m;
  const std::int64_t es = static_cast<std::int64_t>(dtype_size(shard_.dtype()));
  m.parameters = (stage_ == 3 ? shard_elements_ : padded_) * es;
  m.gradients = (stage_ == 1 ? padded_ : shard_elements_) * es;
  m.optimizer = optimizer_->state_total_bytes();  // (state() would copy every buffer)
  // Stage 3: the full parameters gathered at once during a step; else they stay whole.
  m.peak_parameters = stage_ == 3 ? peak_parameter_bytes_ : m.parameters;
  return m;
}

void Zero::prepare(ModelPart& part) {
  std::vector<std::string> layers;
  if (stage_ >= 2 && !part.stage) layers = part.model.layer_prefixes();
  // (counted first: stage 3 leaves the parameters without storage)
  for (const auto& [name, p] : part.trained) elements_ += p.value().numel();
  zero_ = std::make_unique<ZeroRedundancyOptimizer>(part.trained, group_, stage_, make_optimizer_, layers);
  // The model's own parameter tensors, replaced by the flat buffer (stages 1, 2) or the
  // shard (3), and the set-up's copies: given back, not kept in the allocator's cache.
  allocator_release_cache();
  if (stage_ == 3 && !layers.empty()) {
    layered_ = &part.model;
    part.model.set_layer_hook([z = zero_.get()](std::int64_t layer, bool after) {
      if (after) z->after_layer(static_cast<std::size_t>(layer));
      else z->before_layer(static_cast<std::size_t>(layer));
    });
  }
}

void Zero::after_backward(CommStats& stats) {
  // Every ZeRO collective blocks: all of it is exposed.
  const auto start = std::chrono::steady_clock::now();
  const double s = zero_->finish().count() + gather_seconds_;
  record_span(stage_ == 1 ? "all-reduce gradients" : "reduce-scatter gradients", "comm", 0, start);
  gather_seconds_ = 0;
  stats.seconds += s;
  stats.exposed_seconds += s;
}

bool Zero::apply(Optimizer&, CommStats& stats) {
  const auto start = std::chrono::steady_clock::now();
  const double s = zero_->step().count();
  stats.seconds += s;
  stats.exposed_seconds += s;
  record_span("update, all-gather parameters", "comm", 0, start);
  return true;
}

void Zero::finish() {
  if (!whole_model_at_end_) return;  // (the parameters stay sharded)
  if (layered_) layered_->set_layer_hook(nullptr);  // rank 0 may run the model alone from here
  zero_->gather_all();
}

std::optional<StateDict> Zero::optimizer_state(Optimizer&, std::vector<StateDict>& per_rank) {
  zero_->gather_all();
  auto state = zero_->gather_state();
  per_rank = std::move(state.per_rank);
  return std::move(state.consolidated);
}

std::int64_t Zero::replicated_bytes() const {
  const ZeroMemory m = zero_->memory();
  const std::int64_t per_element = zero_->shard_elements() > 0 ? m.optimizer / zero_->shard_elements() : 0;
  return elements_ * 4 * 2 + elements_ * per_element;
}

std::vector<std::string> Zero::report_lines() {
  const ZeroMemory m = zero_->memory();
  return {fmt::format("ZeRO stage {} on {} rank(s), rank 0 holds between steps: parameters {}, gradients {}, optimizer "
                      "state {}; total {} (replicated, as DDP: {}); parameters during a step: {}",
                      stage_, group_ ? group_->size() : 1, human_bytes(m.parameters), human_bytes(m.gradients),
                      human_bytes(m.optimizer), human_bytes(m.total()), human_bytes(replicated_bytes()),
                      human_bytes(m.peak_parameters))};
}

void Zero::summarize(nlohmann::json& summary) const {
  const ZeroMemory m = zero_->memory();
  summary["zero"] = stage_;
  summary["zero_memory"] = {{"stage", stage_},        {"parameters", m.parameters},
                            {"gradients", m.gradients}, {"optimizer", m.optimizer},
                            {"step_parameters", m.peak_parameters}, {"replicated", replicated_bytes()}};
}

}  // namespace weft::parallel
