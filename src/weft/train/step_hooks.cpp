#include "weft/train/step_hooks.h"

#include <fmt/format.h>

#include <cstdlib>
#include <limits>
#include <thread>
#include <vector>

#include "weft/tensor/thread_pool.h"
#include "weft/util/error.h"
#include "weft/util/parse.h"

namespace weft {

namespace {

// WEFT_STRAGGLER's milliseconds for this rank (0: none).
int straggler_ms(int rank) {
  const char* e = std::getenv("WEFT_STRAGGLER");
  if (!e) return 0;
  const auto pair = parse_integer_pair(e);
  constexpr std::int64_t kMost = std::numeric_limits<int>::max();
  if (!pair || pair->first < 0 || pair->first > kMost || pair->second < 0 || pair->second > kMost)
    throw ConfigError(std::string("WEFT_STRAGGLER='") + e + "' is not RANK:MILLISECONDS");
  return pair->first == rank ? static_cast<int>(pair->second) : 0;
}

// WEFT_SLOWDOWN's factor for this rank (1: none).
double slowdown_factor(int rank) {
  const char* e = std::getenv("WEFT_SLOWDOWN");
  if (!e) return 1;
  const auto pair = split_pair(e);
  const auto who = pair ? parse_integer(pair->first) : std::nullopt;
  const auto factor = pair ? parse_number(pair->second) : std::nullopt;
  if (!who || *who < 0 || *who > std::numeric_limits<int>::max() || !factor || !(*factor >= 1 && *factor <= 1000))
    throw ConfigError(std::string("WEFT_SLOWDOWN='") + e + "' is not RANK:FACTOR (a factor from 1 to 1000)");
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
  if (auto change = governor_.take_change())
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

}  // namespace weft
