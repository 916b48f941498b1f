#include "weft/parallel/zero.h"

#include <cmath>

#include "weft/tensor/ops.h"

#include <map>

#include "weft/parallel/ddp.h"
#include "weft/util/error.h"

namespace weft::parallel {

using Clock = std::chrono::steady_clock;

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(Module& model, std::shared_ptr<comm::Communicator> comm, int stage,
                                                 const OptimizerFactory& make_optimizer)
    : model_(model), comm_(std::move(comm)), stage_(stage) {
  if (stage < 1 || stage > 3) throw ConfigError("--zero must be 1, 2 or 3, got " + std::to_string(stage));
  if (comm_) {
    rank_ = comm_->rank();
    world_ = comm_->size();
  }
  for (auto& [name, p] : model.named_parameters()) {
    names_.push_back(name);
    params_.push_back(p);
  }
  if (params_.empty()) throw ConfigError("ZeRO: the model has no parameters");
  const DType dtype = params_.front().dtype();
  for (const Var& p : params_) {
    if (p.dtype() != dtype) throw ConfigError("ZeRO needs every parameter in one dtype");
    shapes_.push_back(p.shape());
    offsets_.push_back(elements_);
    elements_ += p.value().numel();
  }
  shard_elements_ = (elements_ + world_ - 1) / world_;
  padded_ = shard_elements_ * world_;

  Tensor flat = Tensor::zeros({padded_}, dtype);
  for (std::size_t k = 0; k < params_.size(); ++k) {
    flat.slice(0, offsets_[k], offsets_[k] + params_[k].value().numel()).view(shapes_[k]).copy_(params_[k].value());
  }
  if (comm_) comm_->broadcast(flat.raw_data(), padded_, comm_dtype(flat), 0)->wait();  // replicas start equal

  Tensor mine = flat.slice(0, rank_ * shard_elements_, (rank_ + 1) * shard_elements_);
  if (stage_ == 3) {
    shard_ = Var(mine.clone(), true);  // the only copy kept between steps
    release();
  } else {
    install(flat);
    shard_ = Var(mine, true);  // a view: the optimizer updates the full buffer in place
  }
  optimizer_ = make_optimizer({{"shard", shard_}});
}

ZeroRedundancyOptimizer::State ZeroRedundancyOptimizer::gather_state() {
  State out;
  out.per_rank.resize(static_cast<std::size_t>(world_));
  // Each optimizer buffer ("exp_avg.shard", ...) is one flat shard: all-gather it, then cut
  // the full buffer into the parameters' pieces.
  for (const auto& [key, shard] : optimizer_->state()) {
    const std::string prefix = key.substr(0, key.rfind('.'));
    Tensor full = Tensor::zeros({padded_}, shard.dtype());
    Tensor mine = shard.contiguous();
    if (comm_ && world_ > 1) comm_->allgather(mine.raw_data(), full.raw_data(), shard_elements_, comm_dtype(full))->wait();
    else full.slice(0, 0, shard_elements_).copy_(mine);
    for (int r = 0; r < world_; ++r)
      out.per_rank[static_cast<std::size_t>(r)].emplace_back(
          key, full.slice(0, r * shard_elements_, (r + 1) * shard_elements_).clone());
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
    mine.emplace_back(key, full.slice(0, rank_ * shard_elements_, (rank_ + 1) * shard_elements_).clone());
  }
  optimizer_->load_state(mine);
}

void ZeroRedundancyOptimizer::install(Tensor flat) {
  flat_params_ = flat;
  for (std::size_t k = 0; k < params_.size(); ++k) {
    const std::int64_t n = shape_numel(shapes_[k]);
    params_[k].mutable_value() = flat.slice(0, offsets_[k], offsets_[k] + n).view(shapes_[k]);
  }
  peak_parameter_bytes_ = std::max<std::int64_t>(peak_parameter_bytes_, static_cast<std::int64_t>(flat.nbytes()));
}

std::chrono::duration<double> ZeroRedundancyOptimizer::gather() {
  if (stage_ != 3 || flat_params_.defined()) return std::chrono::duration<double>(0);
  const auto start = Clock::now();
  Tensor flat = Tensor::empty({padded_}, shard_.dtype());
  if (comm_) {
    comm_->allgather(shard_.value().raw_data(), flat.raw_data(), shard_elements_, comm_dtype(flat))->wait();
  } else {
    flat.copy_(shard_.value());
  }
  install(flat);
  return Clock::now() - start;
}

void ZeroRedundancyOptimizer::release() {
  if (stage_ != 3) return;
  flat_params_ = Tensor();
  // The parameters keep their shapes' names but no storage until the next gather().
  for (auto& p : params_) p.mutable_value() = Tensor::empty({0}, shard_.dtype());
}

std::chrono::duration<double> ZeroRedundancyOptimizer::finish() {
  const auto start = Clock::now();
  // The gradients in one flat buffer (zeros where a parameter got none, and in the padding).
  Tensor grads = Tensor::zeros({padded_}, shard_.dtype());
  for (std::size_t k = 0; k < params_.size(); ++k) {
    Var p = params_[k];
    if (p.grad().defined()) {
      grads.slice(0, offsets_[k], offsets_[k] + shape_numel(shapes_[k])).view(shapes_[k]).copy_(p.grad());
    }
    p.clear_grad();  // the full gradients are not kept past this point
  }
  if (stage_ == 1) {
    if (comm_) comm_->allreduce(grads.raw_data(), padded_, comm_dtype(grads), comm::ReduceOp::kAvg)->wait();
    flat_grads_ = grads;
    shard_.set_grad(grads.slice(0, rank_ * shard_elements_, (rank_ + 1) * shard_elements_));
  } else {
    Tensor mine = Tensor::empty({shard_elements_}, shard_.dtype());
    if (comm_) {
      comm_->reduce_scatter(grads.raw_data(), mine.raw_data(), shard_elements_, comm_dtype(grads), comm::ReduceOp::kAvg)
          ->wait();
    } else {
      mine.copy_(grads);
    }
    shard_.set_grad(mine);
  }
  return Clock::now() - start;
}

double ZeroRedundancyOptimizer::clip_grad_norm(double max_norm) {
  double sq = 0;
  if (shard_.grad().defined()) {
    const Tensor g = shard_.grad().contiguous();
    const float* d = g.data<float>();
    for (std::int64_t i = 0; i < g.numel(); ++i) sq += static_cast<double>(d[i]) * static_cast<double>(d[i]);
  }
  if (comm_ && world_ > 1) comm_->allreduce(&sq, 1, comm::DataType::kF64, comm::ReduceOp::kSum)->wait();
  const double norm = std::sqrt(sq);
  if (max_norm > 0 && norm > max_norm && shard_.grad().defined())
    shard_.set_grad(ops::mul(shard_.grad(), max_norm / (norm + 1e-6)));
  return norm;
}

std::chrono::duration<double> ZeroRedundancyOptimizer::step() {
  optimizer_->step();
  if (stage_ == 3) {
    release();
    return std::chrono::duration<double>(0);
  }
  // Every rank's updated shard into every rank's full parameters (in place).
  const auto start = Clock::now();
  if (comm_) {
    void* flat = flat_params_.raw_data();
    const void* mine = shard_.value().raw_data();
    comm_->allgather(mine, flat, shard_elements_, comm_dtype(flat_params_))->wait();
  }
  return Clock::now() - start;
}

ZeroMemory ZeroRedundancyOptimizer::memory() const {
  ZeroMemory m;
  const std::int64_t es = static_cast<std::int64_t>(dtype_size(shard_.dtype()));
  m.parameters = (stage_ == 3 ? shard_elements_ : padded_) * es;
  m.gradients = (stage_ == 1 ? padded_ : shard_elements_) * es;
  for (const auto& [name, t] : optimizer_->state()) m.optimizer += static_cast<std::int64_t>(t.nbytes());
  m.peak_parameters = std::max(peak_parameter_bytes_, m.parameters);
  return m;
}

}  // namespace weft::parallel
