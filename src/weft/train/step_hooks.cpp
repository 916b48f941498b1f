#include "weft/train/step_hooks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include "weft/parallel/pipeline.h"
#include "weft/tensor/allocator.h"
#include "weft/tensor/ops.h"
#include "weft/tensor/thread_pool.h"
#include "weft/util/env.h"
#include "weft/util/error.h"
#include "weft/util/parse.h"

namespace weft {

MetricsHook::MetricsHook(std::unique_ptr<MetricsLog> log, const nlohmann::json& run_record, parallel::RankGroup replicas,
                         bool lockstep, std::string unit, std::int64_t steps_per_epoch,
                         std::chrono::steady_clock::time_point start)
    : log_(std::move(log)), replicas_(replicas), lockstep_(lockstep), unit_(std::move(unit)),
      steps_per_epoch_(steps_per_epoch), start_(start) {
  log_->write(run_record);
}

void MetricsHook::after_step(const StepFacts& f) {
  double loss = f.loss;
  if (lockstep_) {  // the global batch's: the replicas' mean of weighted losses, as the printed train loss
    loss *= f.batch->weight;
    replicas_.sum(&loss, 1);
    loss /= replicas_.size();
  }
  record_ = {{"kind", "step"},
             {"step", f.step},
             {"epoch", static_cast<double>(f.step) / static_cast<double>(steps_per_epoch_)},
             {"loss", loss},
             {"lr", f.lr},
             {unit_ + "_per_second", static_cast<double>(f.units) / std::max(f.seconds, 1e-9)},
             {"seconds", f.seconds},
             {"batch_rows", f.rows},
             {"compute_seconds", f.compute_seconds},
             {"comm_seconds", f.comm_seconds},
             {"exposed_seconds", f.exposed_seconds},
             {"peak_step_bytes", f.peak_bytes},
             {"threads", f.threads}};
}

void MetricsHook::after_evaluation(const StepOutcome& outcome) {
  nlohmann::json r = record_;
  r["time"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  r["unix_time"] = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  r["memory_bytes"] = static_cast<std::int64_t>(allocator_live_bytes());
  if (outcome.evaluation) r[outcome.evaluation->field] = outcome.evaluation->value;
  if (outcome.evaluation && outcome.train_loss) r["train_loss"] = *outcome.train_loss;
  if (outcome.noise_scale) r["noise_scale"] = *outcome.noise_scale;
  log_->write(r);
}

namespace {

// WEFT_STRAGGLER's milliseconds for this rank (0: none).
int straggler_ms(int rank) {
  const auto e = env_string("WEFT_STRAGGLER");
  if (!e) return 0;
  const auto pair = parse_integer_pair(*e);
  constexpr std::int64_t kMost = std::numeric_limits<int>::max();
  if (!pair || pair->first < 0 || pair->first > kMost || pair->second < 0 || pair->second > kMost)
    throw ConfigError("WEFT_STRAGGLER='" + *e + "' is not RANK:MILLISECONDS");
  return pair->first == rank ? static_cast<int>(pair->second) : 0;
}

// WEFT_SLOWDOWN's factor for this rank (1: none).
double slowdown_factor(int rank) {
  const auto e = env_string("WEFT_SLOWDOWN");
  if (!e) return 1;
  const auto pair = split_pair(*e);
  const auto who = pair ? parse_integer(pair->first) : std::nullopt;
  const auto factor = pair ? parse_number(pair->second) : std::nullopt;
  if (!who || *who < 0 || *who > std::numeric_limits<int>::max() || !factor || !(*factor >= 1 && *factor <= 1000))
    throw ConfigError("WEFT_SLOWDOWN='" + *e + "' is not RANK:FACTOR (a factor from 1 to 1000)");
  return *who == rank ? *factor : 1;
}

}  // namespace

std::unique_ptr<FaultInjection> FaultInjection::from_env(int rank) {
  const int ms = straggler_ms(rank);
  const double slowdown = slowdown_factor(rank);
  if (ms == 0 && slowdown == 1) return nullptr;
  return std::unique_ptr<FaultInjection>(new FaultInjection(ms, slowdown));
}

void FaultInjection::before_compute() {
  if (straggle_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(straggle_ms_));
}

void FaultInjection::after_compute(double busy_seconds) {
  if (!per_micro_batch_) slow_by(busy_seconds);
}

void FaultInjection::slow_by(double busy_seconds) const {
  if (slowdown_ > 1)  // FACTOR - 1 more times the computation
    std::this_thread::sleep_for(std::chrono::duration<double>((slowdown_ - 1) * std::max(busy_seconds, 0.0)));
}

void ThreadGovernorHook::after_step(const StepFacts& facts) {
  // Other processes' share of the cores during the step: a quarter of them counts as busy.
  const int next = governor_.observe(facts.seconds, other_load_.sample() > 0.25);
  if (next != get_active_threads()) set_active_threads(next);
  if (auto change = governor_.take_change(); change && out_)
    fmt::print(out_, "threads: {} -> {} ({})\n", change->from, change->to, change->why);
}

void ShareBalancingHook::after_step(const StepFacts& facts) {
  if (!balancer_.observe(facts.compute_seconds, facts.batch->inputs.size(0))) return;  // the window goes on
  const std::vector<double> speeds = replicas_.gather(balancer_.speed());
  const auto next = balancer_.decide(task_.speeds(), speeds, batch_);
  if (!next) return;
  std::string measured;
  for (double s : speeds) measured += fmt::format("{}{:.0f}", measured.empty() ? "" : ", ", s);
  fmt::print(out_, "batch shares: {} -> {} (step {}: the replicas compute {} {}/s)\n", shares_text(batch_, task_.speeds()),
             shares_text(batch_, *next), facts.step, measured, task_.unit() == "tokens" ? "rows" : task_.unit());
  task_.set_speeds(*next);
}

void NoiseScaleHook::after_step(const StepFacts& facts) {
  // A replica's gradient carries its weight (task.h): divided out.
  const parallel::GradientNorms* norms = strategies_->gradient_norms();
  if (!norms || !replicas_) return;
  const parallel::StepBatch& batch = *facts.batch;
  const double w = batch.weight, own_rows = static_cast<double>(batch.inputs.size(0));
  double sums[2] = {w > 0 ? norms->local_sq / (w * w) : 0.0, w > 0 ? 1.0 / own_rows : 0.0};
  replicas_.sum(sums, 2);
  const double replicas = replicas_.size();
  noise_.observe(sums[0] / replicas, sums[1] / replicas, norms->mean_sq, static_cast<double>(facts.rows));
}

void TimelineHook::after_step(const StepFacts& facts) {
  timeline_.add("data", "data", facts.started, facts.computing);
  for (const auto& s : facts.comm->spans) timeline_.add(s.name, s.category, s.start, s.end, s.row);
}

void ProfileHook::after_step(const StepFacts& facts) {
  profile_.end_step(facts.seconds, std::chrono::duration<double>(facts.computing - facts.started).count(),
                    facts.exposed_seconds);
}

void ConvergedFreezing::after_step(const StepFacts&) {
  const std::size_t layers = task_.layers(model_), frozen = frozen_;
  std::vector<double> sums(3 * layers, 0);  // per layer: gradient, weights (squared norms), has parameters
  for (const auto& [name, p] : strategies_->part().trained) {
    const int layer = task_.layer_of(name);
    if (layer < 0 || static_cast<std::size_t>(layer) >= layers) continue;
    const auto l = static_cast<std::size_t>(layer);
    sums[2 * layers + l] = 1;
    sums[layers + l] += ops::sum_of_squares(p.value());
    if (p.grad().defined()) sums[l] += ops::sum_of_squares(p.grad());
  }
  parallel::RankGroup(strategies_->part().model_group).sum(sums);
  std::vector<bool> has(layers);
  for (std::size_t l = 0; l < layers; ++l) has[l] = sums[2 * layers + l] > 0;
  calm_.resize(layers, 0);
  std::size_t last_trained = 0;  // the last layer with parameters: it always trains
  for (std::size_t l = 0; l < layers; ++l)
    if (has[l]) last_trained = l;
  for (std::size_t l = frozen; l < last_trained; ++l)
    if (has[l]) calm_[l] = std::sqrt(sums[l]) < rule_.ratio * std::sqrt(sums[layers + l]) ? calm_[l] + 1 : 0;
  std::size_t next = frozen;  // the longest run of calm layers from the first unfrozen one
  for (std::size_t l = frozen; l < last_trained; ++l) {
    if (has[l] && calm_[l] < rule_.steps) break;
    if (has[l]) next = l + 1;
  }
  if (next > frozen)
    while (next < last_trained && !has[next]) ++next;  // with the layers without parameters after it
  next_ = next > frozen ? next : 0;
}

std::optional<LayoutRequest> ConvergedFreezing::take_layout_request() {
  if (next_ == 0) return std::nullopt;
  LayoutRequest r;
  r.freeze_below = std::exchange(next_, 0);
  return r;
}

void StageSpeeds::after_step(const StepFacts& facts) {
  constexpr int kWarmup = 1, kTimed = 5;
  const parallel::GptPipeline* pipe = strategies_->pipeline();
  if (done_ || !pipe || pipe->stages() < 2) return;
  if (++steps_ <= kWarmup) return;
  busy_ += pipe->last_busy();
  if (steps_ < kWarmup + kTimed) return;
  done_ = true;
  const int stages = pipe->stages();
  std::vector<double> sums(2 * static_cast<std::size_t>(stages), 0);  // per stage: costs, seconds
  sums[static_cast<std::size_t>(pipe->stage())] = pipe->stage_cost();
  sums[static_cast<std::size_t>(stages + pipe->stage())] = busy_;
  world_.sum(sums);
  std::vector<double> speeds(static_cast<std::size_t>(stages));
  for (std::size_t s = 0; s < speeds.size(); ++s) speeds[s] = sums[s] / std::max(sums[speeds.size() + s], 1e-12);
  const double fastest = *std::max_element(speeds.begin(), speeds.end());
  std::string shares;
  for (double& v : speeds) {
    v = std::max(v / fastest, 1e-3);
    shares += fmt::format("{}{:.2f}", shares.empty() ? "" : ":", v);
  }
  const std::vector<std::int64_t> bounds = pipe->partition_for(speeds);
  const auto blocks = [](const std::vector<std::int64_t>& b) {
    std::string text;
    for (std::size_t v = 0; v + 1 < b.size(); ++v) text += fmt::format("{}{}-{}", v ? " | " : "", b[v], b[v + 1] - 1);
    return text;
  };
  const bool moves = bounds != pipe->boundaries();
  fmt::print(out_, "stage speeds measured over steps {}-{}: {}; {}\n", facts.step - kTimed + 1, facts.step, shares,
             moves ? fmt::format("blocks per stage {} -> {}", blocks(pipe->boundaries()), blocks(bounds))
                   : std::string("the blocks stay where they are"));
  std::fflush(out_);
  if (moves) speeds_ = speeds;
}

std::optional<LayoutRequest> StageSpeeds::take_layout_request() {
  if (speeds_.empty()) return std::nullopt;
  LayoutRequest r;
  r.stage_speeds = std::move(speeds_);
  speeds_.clear();
  return r;
}

}  // namespace weft
