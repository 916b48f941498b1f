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

// What a hook asked after a step (step_hooks.h): layers frozen (a pipeline goes on in a new
// layout, else the strategies are rebuilt over the parameters still trained, the optimizer's
// state kept), or a pipeline's stages re-balanced for their measured speeds.
void Run::apply(const LayoutRequest& request) {
  if (const std::size_t next = request.freeze_below; next > frozen_) {
    fmt::print(out_, "freezing layers {}-{} (step {}: their gradient norms stayed under {} of their weights' for {} "
                     "steps): {} parameters frozen in all\n",
               frozen_, next - 1, at_.step, freeze_rule_->ratio, freeze_rule_->steps, parameters_below(next));
    std::fflush(out_);
    if (const auto* p = strategies_->pipeline(); p && p->stages() > 1) {  // (each freed the others' layers)
      frozen_ = next;
      relayout_ = plan_relayout(true);
    } else {
      const parallel::TrainState state = strategies_->gather_state();
      const std::int64_t steps = strategies_->optimizer().steps();
      frozen_ = next;
      build_strategies();
      strategies_->restore(state.optimizer, steps);
    }
  }
  if (!request.stage_speeds.empty() && !relayout_) {
    const int stages = strategies_->pipeline()->stages();
    relayout_ = Relayout{stages, stages, request.stage_speeds, {}};
  }
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

}  // namespace weft
