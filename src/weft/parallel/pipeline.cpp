#include <nlohmann/json.hpp>

#include "weft/parallel/pipeline.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <cmath>
#include <limits>

#include "weft/autograd/functions.h"
#include "weft/tensor/ops.h"
#include "weft/util/error.h"

namespace weft::parallel {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Parts each of whose cost is at most `limit` times its speed, greedily; returns the part
// count it needs.
int parts_needed(const std::vector<double>& c, double limit, const std::vector<double>& speeds,
                 std::vector<std::int64_t>* bounds) {
  int parts = 1;
  double acc = 0;
  if (bounds) bounds->assign(1, 0);
  const auto cap = [&](int part) {
    return speeds.empty() ? limit : limit * speeds[static_cast<std::size_t>(part) % speeds.size()];
  };
  for (std::size_t i = 0; i < c.size(); ++i) {
    if (acc > 0 && acc + c[i] > cap(parts - 1)) {
      ++parts;
      acc = 0;
      if (bounds) bounds->push_back(static_cast<std::int64_t>(i));
    }
    acc += c[i];
  }
  if (bounds) bounds->push_back(static_cast<std::int64_t>(c.size()));
  return parts;
}

}  // namespace

std::vector<std::int64_t> balance_blocks(const std::vector<double>& costs, int parts, double first_extra, double last_extra,
                                         const std::vector<double>& speeds) {
  const int n = static_cast<int>(costs.size());
  if (parts < 1) throw ConfigError("pipeline: at least one stage");
  if (parts > n)
    throw ConfigError("pipeline: " + std::to_string(parts) + " (virtual) stages need at least as many layers; the model has " +
                      std::to_string(n));
  // Binary search on the largest stage's cost; the extras ride on the first and last block.
  std::vector<double> c = costs;
  c.front() += first_extra;
  c.back() += last_extra;
  for (double s : speeds)
    if (!(s > 0 && std::isfinite(s))) throw ConfigError("pipeline: stage speeds must be positive numbers");
  const double slowest = speeds.empty() ? 1 : *std::min_element(speeds.begin(), speeds.end());
  const double fastest = speeds.empty() ? 1 : *std::max_element(speeds.begin(), speeds.end());
  double lo = *std::max_element(c.begin(), c.end()) / fastest, hi = 0;
  for (double x : c) hi += x;
  hi /= slowest;
  for (int it = 0; it < 100; ++it) {
    double mid = (lo + hi) / 2;
    if (parts_needed(c, mid, speeds, nullptr) <= parts) hi = mid;
    else lo = mid;
  }
  std::vector<std::int64_t> b;
  parts_needed(c, hi, speeds, &b);
  // Fewer parts than asked (cheap blocks): split the largest parts until there are enough,
  // so every stage has at least one block.
  while (static_cast<int>(b.size()) - 1 < parts) {
    int best = -1;
    std::int64_t width = 1;
    for (std::size_t p = 0; p + 1 < b.size(); ++p)
      if (b[p + 1] - b[p] > width) {
        width = b[p + 1] - b[p];
        best = static_cast<int>(p);
      }
    b.insert(b.begin() + best + 1, b[best] + width / 2);
  }
  return b;
}

GptPipeline::GptPipeline(StageModel& model, std::shared_ptr<comm::Communicator> group, const PipelineOptions& options)
    : model_(model), group_(std::move(group)), options_(options) {
  stages_ = group_ ? group_->size() : 1;
  stage_ = group_ ? group_->rank() : 0;
  if (options_.micro_batches < 1) throw ConfigError("a pipeline needs at least one micro-batch");
  if (options_.schedule != algo::PipeSchedule::kInterleaved) options_.chunks = 1;
  else if (options_.chunks < 2) throw ConfigError("the interleaved pipeline schedule needs 2 or more model chunks per stage");
  virtual_stages_ = stages_ * options_.chunks;
  const GptConfig& cfg = model_.config();
  const auto named = model_.parameters();
  // Costs per block: parameters, or measured forward + backward time.
  std::vector<double> costs(static_cast<std::size_t>(cfg.layers), 0.0);
  double first_extra = 0, last_extra = static_cast<double>(cfg.vocab * cfg.dim);  // the head's projection
  for (const auto& [name, p] : named) {
    const GptPart part = model_.gpt().part_of(name);
    const auto n = static_cast<double>(p.value().numel());
    if (part.kind == GptPart::kBlock) costs[static_cast<std::size_t>(part.block)] += n;
    else if (part.kind == GptPart::kEmbedding) first_extra += n;
    else last_extra += n;
  }
  if (options_.balance == "time") {
    // Time one block and the embedding and head on a small batch; every stage takes stage 0's
    // figures so that all agree on the partition.
    std::vector<double> t(3, 0.0);
    if (stage_ == 0) {
      const std::int64_t B = 2, T = std::min<std::int64_t>(cfg.context, 64);
      Tensor ids = Tensor::zeros({B, T});
      auto time_it = [&](const std::function<Var()>& f) {
        double best = 1e300;
        for (int rep = 0; rep < 3; ++rep) {
          auto t0 = Clock::now();
          Var out = f();
          sum(out).backward();
          best = std::min(best, since(t0));
        }
        return best;
      };
      Var x(Tensor::zeros({B, T, cfg.dim}), true);
      t[0] = time_it([&] { return model_.run_blocks(x, 0, 1); });
      t[1] = time_it([&] { return model_.embed(ids); });
      t[2] = time_it([&] { return model_.head_loss(x, std::vector<std::int32_t>(static_cast<std::size_t>(B * T), 0)); });
      for (const auto& [name, p] : named) Var(p).clear_grad();
    }
    if (group_) group_->broadcast(t.data(), 3, comm::DataType::kF64, 0)->wait();
    std::fill(costs.begin(), costs.end(), t[0]);
    first_extra = t[1];
    last_extra = t[2];
  } else if (options_.balance != "params") {
    throw ConfigError("unknown stage balance '" + options_.balance + "' (known: params, time)");
  }
  if (cfg.layers < virtual_stages_)
    throw ConfigError(fmt::format("{} pipeline stages ({} per rank) need at least {} layers; the model has {}", virtual_stages_,
                                  options_.chunks, virtual_stages_, cfg.layers));
  if (!options_.stage_speeds.empty() && static_cast<int>(options_.stage_speeds.size()) != stages_)
    throw ConfigError(fmt::format("--stage-shares: {} shares for {} pipeline stages", options_.stage_speeds.size(), stages_));
  trained_bounds_ = balance_blocks(costs, virtual_stages_, first_extra, last_extra, options_.stage_speeds);
  for (std::int64_t b = 0; b < std::min<std::int64_t>(options_.frozen_blocks, cfg.layers); ++b)
    costs[static_cast<std::size_t>(b)] *= 2.0 / 3.0;
  bounds_ = options_.frozen_blocks > 0
                ? balance_blocks(costs, virtual_stages_, first_extra, last_extra, options_.stage_speeds)
                : trained_bounds_;
  costs_ = costs;
  first_extra_ = first_extra;
  last_extra_ = last_extra;
  const std::vector<std::int64_t>& bounds = bounds_;
  for (int c = 0; c < options_.chunks; ++c) {
    int v = c * stages_ + stage_;
    ranges_.push_back({bounds[static_cast<std::size_t>(v)], bounds[static_cast<std::size_t>(v) + 1]});
  }
  first_ = stage_ == 0;
  last_ = stage_ == stages_ - 1;
  const bool tied_head = model_.config().tied_head;
  for (const auto& [name, p] : named) {
    const bool tied = tied_head && name == GPT::tied_weight();
    if (tied) tied_weight_ = p;
    if (owner_of(name) == stage_ || (tied && last_)) {
      own_.push_back({name, p});
    } else if (stages_ > 1) {
      // Another stage's: this rank never computes with it.
      Var q = p;
      q.mutable_value() = Tensor();
    }
  }
  if (tied_head && stages_ > 1 && (first_ || last_)) tied_ = group_->new_group({0, stages_ - 1});
}

std::vector<std::int64_t> GptPipeline::partition_for(const std::vector<double>& speeds) const {
  return balance_blocks(costs_, virtual_stages_, first_extra_, last_extra_, speeds);
}

double GptPipeline::stage_cost() const {
  double cost = 0;
  for (const auto& [begin, end] : ranges_)
    for (std::int64_t b = begin; b < end; ++b) cost += costs_[static_cast<std::size_t>(b)];
  return cost + (first_ ? first_extra_ : 0) + (last_ ? last_extra_ : 0);
}

int GptPipeline::stages_frozen(std::int64_t frozen) const {
  int n = 0;
  for (std::size_t v = 1; v < trained_bounds_.size(); ++v) n += trained_bounds_[v] <= frozen;
  return n;
}

int GptPipeline::owner_of(const std::string& name) const {
  const GptPart part = model_.gpt().part_of(name);
  if (part.kind == GptPart::kBlock) {
    int v = static_cast<int>(std::upper_bound(bounds_.begin(), bounds_.end(), part.block) - bounds_.begin()) - 1;
    return v % stages_;
  }
  return part.kind == GptPart::kFinalNorm ? stages_ - 1 : 0;
}

// The computation since `t0`, to the options' after_compute.
void GptPipeline::computed_since(Clock::time_point t0) const {
  if (options_.after_compute) options_.after_compute(since(t0));
}

void GptPipeline::sum_tied_gradients() {
  if (!tied_) return;
  Tensor g = tied_weight_.grad().defined() ? tied_weight_.grad().contiguous().clone()
                                           : Tensor::zeros(tied_weight_.shape(), tied_weight_.dtype());
  tied_->allreduce(g.data<float>(), g.numel(), comm::DataType::kF32, comm::ReduceOp::kSum)->wait();
  tied_weight_.set_grad(g);
}

double GptPipeline::train_batch(const Tensor& ids, const std::vector<std::int32_t>& targets,
                                const std::function<void()>& update, double weight) {
  return run(ids, targets, true, update, weight);
}

double GptPipeline::eval_batch(const Tensor& ids, const std::vector<std::int32_t>& targets) {
  NoGradGuard no_grad;
  return run(ids, targets, false, {});
}

namespace {
// " (chunk c)" when stages hold several model chunks, for span names.
std::string chunk_label_of(int chunk, int chunks) { return chunks > 1 ? fmt::format(" (chunk {})", chunk) : ""; }
}  // namespace

double GptPipeline::run(const Tensor& ids, const std::vector<std::int32_t>& targets, bool train,
                        const std::function<void()>& update, double weight) {
  const int M = options_.micro_batches, S = stages_, V = virtual_stages_;
  const std::int64_t B = ids.size(0), T = ids.size(1), d = model_.config().dim;
  if (B % M != 0)
    throw ConfigError(fmt::format("a batch of {} sequences does not split into {} micro-batches", B, M));
  const std::int64_t Bm = B / M;
  std::vector<algo::PipeOp> program;
  if (train) {
    program = algo::pipeline_program(options_.schedule, stage_, S, M, options_.chunks);
  } else {
    // Forward only: micro-batch by micro-batch, chunk by chunk.
    for (int m = 0; m < M; ++m)
      for (int c = 0; c < options_.chunks; ++c) {
        int v = c * S + stage_;
        if (v > 0) program.push_back({algo::PipeOpKind::kRecvAct, m, c, (stage_ + S - 1) % S});
        program.push_back({algo::PipeOpKind::kForward, m, c, -1});
        if (v < V - 1) program.push_back({algo::PipeOpKind::kSendAct, m, c, (stage_ + 1) % S});
      }
  }
  const bool seed = options_.schedule == algo::PipeSchedule::kUpdatePerMicroBatch;
  struct Unit {
    Var input, output, loss;
    Tensor grad_out;
  };
  std::map<std::pair<int, int>, Unit> units;
  std::vector<comm::WorkPtr> sends;
  std::vector<Tensor> keep;  // send buffers stay alive until their sends completed
  double loss_sum = 0, busy = 0, update_s = 0, comm_s = 0;  // comm_s: sends, receives and their waits
  const auto t_step = Clock::now();
  const std::int64_t n = Bm * T * d;
  for (const algo::PipeOp& op : program) {
    Unit& u = units[{op.micro, op.chunk}];
    const int v = op.chunk * S + stage_;
    switch (op.kind) {
      case algo::PipeOpKind::kRecvAct: {
        const auto t0 = Clock::now();
        Tensor buf = Tensor::zeros({Bm, T, d});
        group_->recv(buf.data<float>(), n, comm::DataType::kF32, op.peer);
        comm_s += since(t0);
        if (recording_spans()) record_span(fmt::format("recv activation {} from stage {}", op.micro, op.peer), "comm", 1, t0);
        u.input = Var(buf, train);
        break;
      }
      case algo::PipeOpKind::kForward: {
        const auto t0 = Clock::now();
        const auto [begin, end] = ranges_[static_cast<std::size_t>(op.chunk)];
        Var x = v == 0 ? model_.embed(ids.slice(0, op.micro * Bm, (op.micro + 1) * Bm).contiguous()) : u.input;
        u.output = model_.run_blocks(x, begin, end);
        if (v == V - 1) {
          std::vector<std::int32_t> t(targets.begin() + op.micro * Bm * T, targets.begin() + (op.micro + 1) * Bm * T);
          Var loss = model_.head_loss(u.output, t);
          loss_sum += loss.item();
          if (train) {  // the step's gradient: the mean over the micro-batches, times the replica's weight
            const double scale = (seed ? 1.0 : 1.0 / M) * weight;
            u.loss = scale == 1 ? loss : mul(loss, scale);
          }
        }
        computed_since(t0);
        busy += since(t0);
        if (recording_spans()) record_span(fmt::format("forward {}{}", op.micro, chunk_label_of(op.chunk, options_.chunks)), "compute", 0, t0);
        break;
      }
      case algo::PipeOpKind::kSendAct: {
        const auto t0 = Clock::now();
        keep.push_back(u.output.value().contiguous());
        sends.push_back(group_->isend(keep.back().data<float>(), n, comm::DataType::kF32, op.peer));
        comm_s += since(t0);
        if (recording_spans()) record_span(fmt::format("send activation {} to stage {}", op.micro, op.peer), "comm", 1, t0);
        break;
      }
      case algo::PipeOpKind::kRecvGrad: {
        const auto t0 = Clock::now();
        u.grad_out = Tensor::zeros({Bm, T, d});
        group_->recv(u.grad_out.data<float>(), n, comm::DataType::kF32, op.peer);
        comm_s += since(t0);
        if (recording_spans()) record_span(fmt::format("recv gradient {} from stage {}", op.micro, op.peer), "comm", 1, t0);
        break;
      }
      case algo::PipeOpKind::kBackward: {
        const auto t0 = Clock::now();
        if (v == V - 1) u.loss.backward();
        else u.output.backward(u.grad_out);
        computed_since(t0);
        busy += since(t0);
        if (recording_spans()) record_span(fmt::format("backward {}{}", op.micro, chunk_label_of(op.chunk, options_.chunks)), "compute", 0, t0);
        if (v == 0) units.erase({op.micro, op.chunk});
        break;
      }
      case algo::PipeOpKind::kSendGrad: {
        const auto t0 = Clock::now();
        keep.push_back(u.input.grad().contiguous());
        sends.push_back(group_->isend(keep.back().data<float>(), n, comm::DataType::kF32, op.peer));
        comm_s += since(t0);
        if (recording_spans()) record_span(fmt::format("send gradient {} to stage {}", op.micro, op.peer), "comm", 1, t0);
        units.erase({op.micro, op.chunk});
        break;
      }
      case algo::PipeOpKind::kStep:
        // Seed 002's schedule: this micro-batch's update, right after its backward. The
        // update's collectives run on other communicators: first let the sends go.
        {
          const auto t0 = Clock::now();
          for (auto& w : sends) w->wait();
          comm_s += since(t0);
        }
        {
          const auto t0 = Clock::now();
          sum_tied_gradients();
          update();
          update_s += since(t0);
        }
        break;
    }
  }
  {
    const auto t0 = Clock::now();
    for (auto& w : sends) w->wait();
    comm_s += since(t0);
  }
  if (train && !seed) {
    const auto t0 = Clock::now();
    sum_tied_gradients();
    update();
    update_s += since(t0);
  }
  // The loss lives on the last stage; every stage returns it.
  double loss = last_ ? loss_sum / M : 0.0;
  if (group_ && S > 1) group_->allreduce(&loss, 1, comm::DataType::kF64, comm::ReduceOp::kSum)->wait();
  if (train) {
    const double step_s = since(t_step) - update_s;  // the optimizer's time is not pipeline idle time
    double bubble = step_s > 0 ? 1 - busy / step_s : 0;
    if (group_ && S > 1) group_->allreduce(&bubble, 1, comm::DataType::kF64, comm::ReduceOp::kAvg)->wait();
    bubble_ = bubble;
    busy_ = busy;
    comm_ = comm_s;
  }
  return loss;
}

void GptPipeline::gather_parameters(const std::vector<std::pair<std::string, Var>>& full,
                                    const std::map<std::string, Shape>& shapes) {
  if (!group_ || stages_ == 1) return;
  for (const auto& [name, p] : full) {
    const int owner = owner_of(name);
    if (owner == 0) continue;
    if (stage_ == owner) {
      Tensor v = p.value().contiguous();
      group_->send(v.data<float>(), v.numel(), comm::DataType::kF32, 0);
    } else if (stage_ == 0) {
      Tensor buf = Tensor::zeros(shapes.at(name));
      group_->recv(buf.data<float>(), buf.numel(), comm::DataType::kF32, owner);
      Var q = p;
      q.mutable_value() = buf;
    }
  }
}

void Pipeline::prepare(ModelPart& part) {
  if (!part.stage) {
    auto* gpt = dynamic_cast<GPT*>(&part.model);
    if (!gpt) throw ConfigError("pipeline parallelism needs a GPT");
    local_ = std::make_unique<LocalGpt>(*gpt);
    part.stage = local_.get();
  }
  pipe_ = std::make_unique<GptPipeline>(*part.stage, group_, options_);
  part.trained.clear();
  for (auto& [name, p] : pipe_->own_parameters())
    if (!part.is_frozen(name)) part.trained.emplace_back(name, p);
  part.norm_weight = norm_weight(*part.stage, pipe_->counted_elsewhere());
  part.model_group = model_group_;
  part.accumulates = true;
  part.holds = [p = pipe_.get()](const std::string& name) {
    return p->owner_of(name) == p->stage() || (name == p->tied_name() && p->stage() == p->stages() - 1);
  };
  part_ = &part;
}

std::optional<double> Pipeline::forward_backward(const StepBatch& batch, const std::function<void(bool)>& update) {
  const bool per_micro_batch = options_.schedule == algo::PipeSchedule::kUpdatePerMicroBatch;
  const double loss = pipe_->train_batch(batch.inputs, batch.targets, [&] { update(per_micro_batch); }, batch.weight);
  if (steps_++ > 0) bubble_sum_ += pipe_->last_bubble();
  comm_ = pipe_->last_comm();
  return loss;
}

bool Pipeline::end_step(std::int64_t, bool, CommStats& stats) {
  // The stages' sends and receives are on the step's path: every second of them exposed.
  stats.seconds += comm_;
  stats.exposed_seconds += comm_;
  comm_ = 0;
  return false;
}

std::optional<double> Pipeline::eval_loss(const StepBatch& batch) { return pipe_->eval_batch(batch.inputs, batch.targets); }

void Pipeline::finish() {
  NamedParameters full;
  for (const auto& [name, p] : part_->model.named_parameters()) full.emplace_back(name, p);
  std::map<std::string, Shape> shapes(part_->layout.begin(), part_->layout.end());
  pipe_->gather_parameters(full, shapes);
}

void Pipeline::widen(TrainState& state) {
  // The optimizer's buffers by parameter; every stage has the same kinds of buffer.
  std::vector<std::string> buffers;
  std::map<std::string, Tensor> model(state.model.begin(), state.model.end()), optimizer(state.optimizer.begin(),
                                                                                         state.optimizer.end());
  for (const auto& [key, t] : state.optimizer) {
    const std::string buffer = key.substr(0, key.find('.'));
    if (std::find(buffers.begin(), buffers.end(), buffer) == buffers.end()) buffers.push_back(buffer);
  }
  TrainState whole;
  whole.per_rank = std::move(state.per_rank);
  const int stage = pipe_->stage();
  for (const auto& [name, shape] : part_->layout) {
    const int owner = pipe_->owner_of(name);
    // The value, then each buffer (a frozen parameter has none).
    const std::size_t kinds = part_->is_frozen(name) ? 1 : buffers.size() + 1;
    std::vector<Tensor> pieces;
    if (stage == owner) {
      pieces.push_back(model.at(name));
      for (std::size_t k = 1; k < kinds; ++k) pieces.push_back(optimizer.at(buffers[k - 1] + "." + name).contiguous());
    }
    if (owner != 0 && stage == owner) {
      for (Tensor& t : pieces) group_->send(t.data<float>(), t.numel(), comm::DataType::kF32, 0);
    } else if (owner != 0 && stage == 0) {
      for (std::size_t k = 0; k < kinds; ++k) {
        pieces.push_back(Tensor::zeros(shape));
        group_->recv(pieces.back().data<float>(), pieces.back().numel(), comm::DataType::kF32, owner);
      }
    }
    if (stage != 0) continue;
    whole.model.emplace_back(name, pieces[0]);
    for (std::size_t k = 1; k < kinds; ++k) whole.optimizer.emplace_back(buffers[k - 1] + "." + name, pieces[k]);
  }
  state = std::move(whole);
}

void Pipeline::narrow(StateDict& optimizer) {
  std::set<std::string> own;
  for (const auto& [name, p] : part_->trained) own.insert(name);
  StateDict mine;
  for (auto& [key, t] : optimizer)
    if (own.count(key.substr(key.find('.') + 1))) mine.emplace_back(key, std::move(t));
  optimizer = std::move(mine);
}

double Pipeline::bubble() const {
  return steps_ > 1 ? bubble_sum_ / static_cast<double>(steps_ - 1) : pipe_->last_bubble();
}

double Pipeline::bubble_formula() const {
  const double S = pipe_->stages(), M = options_.micro_batches;
  return (S - 1) / (M + S - 1);
}

std::vector<std::string> Pipeline::intro_lines() {
  const bool interleaved = options_.schedule == algo::PipeSchedule::kInterleaved;
  std::string shares;  // ", stage shares 2:1"
  for (double s : options_.stage_speeds) shares += fmt::format("{}{}", shares.empty() ? ", stage shares " : ":", s);
  std::string parts;
  const auto& b = pipe_->boundaries();
  for (std::size_t v = 0; v + 1 < b.size(); ++v) parts += fmt::format("{}{}-{}", v ? " | " : "", b[v], b[v + 1] - 1);
  return {fmt::format("pipeline: {} stage{}, {} micro-batches, schedule {}{}; blocks per {}stage: {} (balanced by {})",
                      pipe_->stages(), pipe_->stages() == 1 ? "" : "s", options_.micro_batches, algo::pipe_schedule_name(options_.schedule),
                      interleaved ? fmt::format(" ({} chunks per stage)", options_.chunks) : "",
                      interleaved ? "virtual " : "", parts,
                      options_.balance + shares)};
}

std::vector<std::string> Pipeline::report_lines() {
  return {fmt::format("pipeline bubble: {:.1f}% measured (mean over stages and steps), (S-1)/(M+S-1) = {:.1f}%",
                      100 * bubble(), 100 * bubble_formula())};
}

void Pipeline::summarize(nlohmann::json& summary) const {
  summary["pipeline"] = {{"stages", pipe_->stages()}, {"micro_batches", options_.micro_batches},
                         {"schedule", algo::pipe_schedule_name(options_.schedule)},
                         {"bubble", bubble()}, {"bubble_formula", bubble_formula()}};
}

}  // namespace weft::parallel
