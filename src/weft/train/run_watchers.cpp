#include "weft/train/run.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <optional>
#include <thread>

#include "weft/io/checkpoint.h"
#include "weft/io/safetensors.h"
#include "weft/optim/adam.h"
#include "weft/optim/sgd.h"
#include "weft/parallel/elastic.h"
#include "weft/parallel/job.h"
#include "weft/parallel/param_offload.h"
#include "weft/parallel/param_server.h"
#include "weft/parallel/pipeline.h"
#include "weft/tensor/allocator.h"
#include "weft/tensor/kernel_table.h"
#include "weft/tensor/ops.h"
#include "weft/tensor/thread_pool.h"
#include "weft/train/resume.h"
#include "weft/util/checked.h"
#include "weft/util/file.h"
#include "weft/util/machine.h"
#include "weft/util/parse.h"
#include "weft/util/progress.h"
#include "weft/util/size.h"

namespace weft {

// --grow-at noise (rank 0, every 10 steps): when the gradient noise scale is larger than the
// global batch would be on more ranks (--elastic-batch linear: the rows per rank stay), ask
// for those ranks, up to --max-ranks; then wait 50 steps before deciding again.
void Run::grow_by_noise(parallel::LiveMembership& live) {
  const auto b_noise = t_.noise.value();
  if (!b_noise || at_.step % 10 != 0 || at_.step < t_.noise_quiet_until) return;
  const int world = mesh_.shape().dp;
  const double per_rank = static_cast<double>(*o_.batch) / world;
  const int target = static_cast<int>(std::min<double>(o_.max_ranks, std::floor(*b_noise / per_rank)));
  if (target <= world) return;
  live.schedule(at_.step, target, fmt::format("--grow-at noise: gradient noise scale {:.0f}, global batch {}", *b_noise,
                                              *o_.batch));
  t_.noise_quiet_until = at_.step + 50;
}

// The parameters of the first `layers` layers (full shapes: a pipeline stage freed the
// others' values).
std::int64_t Run::parameters_below(std::size_t layers) const {
  std::int64_t n = 0;
  for (const auto& [name, shape] : strategies_->part().layout) {
    const int layer = task_->layer_of(name);
    n += layer >= 0 && static_cast<std::size_t>(layer) < layers ? shape_numel(shape) : 0;
  }
  return n;
}

// --freeze-converged, after a step: each leading layer's gradient norm against its weights'
// (the same on every replica after the all-reduce, summed over a pipeline's stages: every
// rank decides alike). The layers that stayed under the ratio for the window from the first
// unfrozen one on are frozen, with the layers without parameters after them, while one with
// parameters still trains. A pipeline goes on in a new layout after the step.
void Run::freeze_converged() {
  const std::size_t layers = task_->layers(*model_);
  std::vector<double> sums(3 * layers, 0);  // per layer: gradient, weights (squared norms), has parameters
  for (const auto& [name, p] : strategies_->part().trained) {
    const int layer = task_->layer_of(name);
    if (layer < 0 || static_cast<std::size_t>(layer) >= layers) continue;
    const auto l = static_cast<std::size_t>(layer);
    sums[2 * layers + l] = 1;
    sums[layers + l] += ops::sum_of_squares(p.value());
    if (p.grad().defined()) sums[l] += ops::sum_of_squares(p.grad());
  }
  parallel::RankGroup(strategies_->part().model_group).sum(sums);
  const std::vector<double> grad_sq(sums.begin(), sums.begin() + static_cast<std::ptrdiff_t>(layers));
  const std::vector<double> weight_sq(sums.begin() + static_cast<std::ptrdiff_t>(layers),
                                      sums.begin() + static_cast<std::ptrdiff_t>(2 * layers));
  std::vector<bool> has(layers);
  for (std::size_t l = 0; l < layers; ++l) has[l] = sums[2 * layers + l] > 0;
  calm_.resize(layers, 0);
  std::size_t last_trained = 0;  // the last layer with parameters: it always trains
  for (std::size_t l = 0; l < layers; ++l)
    if (has[l]) last_trained = l;
  for (std::size_t l = frozen_; l < last_trained; ++l)
    if (has[l]) calm_[l] = std::sqrt(grad_sq[l]) < freeze_rule_->ratio * std::sqrt(weight_sq[l]) ? calm_[l] + 1 : 0;
  std::size_t next = frozen_;  // the longest run of calm layers from the first unfrozen one
  for (std::size_t l = frozen_; l < last_trained; ++l) {
    if (has[l] && calm_[l] < freeze_rule_->steps) break;
    if (has[l]) next = l + 1;
  }
  if (next > frozen_)
    while (next < last_trained && !has[next]) ++next;  // with the layers without parameters after it
  if (next <= frozen_) return;
  fmt::print(out_, "freezing layers {}-{} (step {}: their gradient norms stayed under {} of their weights' for {} steps): "
                   "{} parameters frozen in all\n",
             frozen_, next - 1, at_.step, freeze_rule_->ratio, freeze_rule_->steps, parameters_below(next));
  std::fflush(out_);
  if (const auto* p = strategies_->pipeline(); p && p->stages() > 1) {  // (each freed the others' layers)
    frozen_ = next;
    relayout_ = plan_relayout(true);
    return;
  }
  const parallel::TrainState state = strategies_->gather_state();
  const std::int64_t steps = strategies_->optimizer().steps();
  frozen_ = next;
  build_strategies();
  strategies_->restore(state.optimizer, steps);
}

// A pipeline's layout for its frozen blocks: the same stages balanced anew (a frozen block
// costs less), or with --merge-frozen-stages one stage fewer for every stage whose blocks
// all froze (GptPipeline::stages_frozen; seed 003 chapter 11: adaptive model parallelism),
// the ranks that frees leaving the job or (dp) re-laid out as more data-parallel replicas.
// None when nothing changes.
std::optional<Relayout> Run::plan_relayout(bool frozen_changed) const {
  const parallel::GptPipeline* pipeline = strategies_->pipeline();
  if (!pipeline || pipeline->stages() == 1) return std::nullopt;
  const int stages = pipeline->stages();
  const int frozen_stages =
      o_.merge_frozen_stages.empty() ? 0 : pipeline->stages_frozen(static_cast<std::int64_t>(frozen_));
  const int to = std::max(1, stages - frozen_stages);
  if (to == stages && !frozen_changed) return std::nullopt;
  const int ranks = mesh_.size(), tp = mesh_.shape().tp;
  const int dp = o_.merge_frozen_stages == "dp" ? ranks / (to * tp) : mesh_.shape().dp;
  Relayout change;
  change.stages_from = stages;
  change.stages_to = to;
  for (int r = dp * to * tp; r < ranks; ++r) change.freed.push_back(r);
  return change;
}

// --stage-shares measured (seed 003 chapter 12: heterogeneous workers): each stage times
// its computation (forward and backward of its micro-batches, not its waits) over the
// run's steps 2-6; every rank then knows each stage's speed, its cost (in the units the
// partition balances) over its time, the mean over the replicas, and when the partition
// those speeds give differs, the pipeline goes on in it after the step. Once per run.
void Run::measure_stage_speeds() {
  constexpr int kWarmup = 1, kTimed = 5;
  const parallel::GptPipeline& pipe = *strategies_->pipeline();
  if (++stage_steps_ <= kWarmup) return;
  stage_busy_ += pipe.last_busy();
  if (stage_steps_ < kWarmup + kTimed) return;
  measure_stages_ = false;
  const int stages = pipe.stages();
  std::vector<double> sums(2 * static_cast<std::size_t>(stages), 0);  // per stage: costs, seconds
  sums[static_cast<std::size_t>(pipe.stage())] = pipe.stage_cost();
  sums[static_cast<std::size_t>(stages + pipe.stage())] = stage_busy_;
  parallel::RankGroup(job_.world.get()).sum(sums);
  std::vector<double> speeds(static_cast<std::size_t>(stages));
  for (std::size_t s = 0; s < speeds.size(); ++s) speeds[s] = sums[s] / std::max(sums[speeds.size() + s], 1e-12);
  const double fastest = *std::max_element(speeds.begin(), speeds.end());
  std::string shares;
  for (double& v : speeds) {
    v = std::max(v / fastest, 1e-3);
    shares += fmt::format("{}{:.2f}", shares.empty() ? "" : ":", v);
  }
  const std::vector<std::int64_t> bounds = pipe.partition_for(speeds);
  const auto blocks = [](const std::vector<std::int64_t>& b) {
    std::string text;
    for (std::size_t v = 0; v + 1 < b.size(); ++v) text += fmt::format("{}{}-{}", v ? " | " : "", b[v], b[v + 1] - 1);
    return text;
  };
  const bool moves = bounds != pipe.boundaries();
  fmt::print(out_, "stage speeds measured over steps {}-{}: {}; {}\n", at_.step - kTimed + 1, at_.step, shares,
             moves ? fmt::format("blocks per stage {} -> {}", blocks(pipe.boundaries()), blocks(bounds))
                   : std::string("the blocks stay where they are"));
  std::fflush(out_);
  if (!moves || relayout_) return;
  Relayout change;
  change.stages_from = change.stages_to = stages;
  change.stage_speeds = speeds;
  relayout_ = change;
}

}  // namespace weft
