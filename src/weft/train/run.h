// One training run on a training rank (train/loop.h's train() runs them): the model, the
// strategies, the data's position and the features that watch the steps, split by job over
//   run.cpp            setting up (the model, a resume, the strategies), the loop over the
//                      steps, one step, evaluation, checkpoints
//   run_watchers.cpp   what watches the steps: the thread governor, share balancing, the
//                      gradient noise scale, converged freezing, stage speeds, re-layouts
//   run_records.cpp    what the run writes: the metrics files, checkpoints, the summary
//   elastic_driver.cpp a live elastic job's generations and hand-overs, and the parameter
//                      server's ranks
//   loop.cpp           train(): a job's roles, and a pipeline's successive layouts
// Internal to train/.
#pragma once

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/io/checkpoint.h"
#include "weft/parallel/elastic.h"
#include "weft/parallel/job.h"
#include "weft/parallel/rank_group.h"
#include "weft/tensor/thread_governor.h"
#include "weft/train/loop.h"
#include "weft/train/metrics.h"
#include "weft/train/noise_scale.h"
#include "weft/train/options.h"
#include "weft/train/resume.h"
#include "weft/train/share_balancer.h"
#include "weft/train/step_hooks.h"
#include "weft/train/step_profile.h"
#include "weft/train/task.h"
#include "weft/train/timeline.h"
#include "weft/util/machine.h"

namespace weft {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The optimizer --optimizer names over `params`, at learning rate `lr`.
std::unique_ptr<Optimizer> make_optimizer(const TrainOptions& o, double lr, parallel::NamedParameters params);

// A rank's figures of the whole run, and of the window since the last evaluation: carried
// from one generation of a live elastic job to the next.
// A pipeline laid out anew after a step (seed 003 chapter 11: adaptive model parallelism),
// for its frozen blocks or its stages' measured speeds (train_in_layouts in loop.cpp).
struct Relayout {
  int stages_from = 0, stages_to = 0;
  std::vector<double> stage_speeds{};  // measured, relative (empty: not measured)
  std::vector<int> freed{};            // the ranks the new layout frees (the job's last)
};

// Why a run stops before its planned end: a live job's membership changes (elastic.h), or
// the pipeline goes on in another layout.
using RunBreak = std::variant<parallel::MembershipChange, Relayout>;

struct RunTotals {
  Clock::time_point start = Clock::now();
  std::int64_t peak_step_bytes = 0, units = 0;  // units: this replica's
  std::int64_t rows = 0;  // the global batches' rows trained
  double train_seconds = 0, compute_seconds = 0;
  std::optional<double> train_loss;  // the last window's mean (none when nothing was trained)
  std::optional<Evaluation> last_eval;
  std::int64_t window_steps = 0, window_units = 0;  // window_units: every replica's
  double window_loss = 0, window_seconds = 0;
  nlohmann::json resizes = nlohmann::json::array();  // a live job's changes so far
  std::optional<Clock::time_point> change_agreed;     // when the change under way was agreed
  std::optional<RunBreak> change;                     // and what it is
  std::optional<std::int64_t> resumed_from;  // the step of the checkpoint the run resumed from
  NoiseScale noise;                    // --grow-at noise: the gradient noise scale
  std::int64_t noise_quiet_until = 0;  // no new decision before this step
};

// One training run on a training rank: what the loop needs between steps.
class Run {
 public:
  // `image`: the state a live job's last generation handed over (instead of --resume's
  // checkpoint), `totals`: this process's figures so far, `task`: its data, already loaded
  // (for the same global batch).
  Run(TrainOptions options, const parallel::Job& job, std::FILE* out, std::optional<Checkpoint> image = {},
      RunTotals totals = {}, std::unique_ptr<Task> task = nullptr);
  // Trains to the end, or (a live job) until the ranks agree on a change of membership.
  std::optional<RunBreak> train(parallel::LiveMembership* live = nullptr);
  // Collective: the run's state as a checkpoint image, given to rank `keep` of the group.
  std::string hand_over_state(int keep);
  // After a failure of the group: whether this rank holds the whole state (DDP: every
  // replica does; ZeRO's shards do not), and that state, taken without communicating.
  // (the parameter server's servers hold theirs).
  bool holds_whole_state() const { return strategies_->holds_whole_state(); }
  std::string own_state();
  RunTotals take_totals() { return std::move(t_); }
  std::unique_ptr<Task> take_task() { return std::move(task_); }
  std::int64_t step() const { return at_.step; }
  TrainSummary finish();
  void save();

 private:
  void resume();
  void continue_handed_over();
  CheckpointMeta checkpoint_meta() const;
  std::string state_image(parallel::TrainState state, double window_mean, double window_steps) const;
  void step(bool last);
  template <class Fn>
  double step_naming_failures(const Fn& fn) const;
  bool steps_in_lockstep() const;  // every replica takes each step together (not the asynchronous PS)
  std::optional<Evaluation> evaluate(bool round_only);
  void report(nlohmann::json& summary);
  std::unique_ptr<MetricsHook> metrics_hook();
  void add_step_hooks();
  void build_strategies();
  void place_optimizer_state();
  void apply(const LayoutRequest& request);
  std::optional<Relayout> plan_relayout(bool frozen_changed) const;
  std::int64_t parameters_below(std::size_t layers) const;
  void grow_by_noise(parallel::LiveMembership& live);

  TrainOptions o_;
  const parallel::Job& job_;
  const parallel::Mesh& mesh_;
  const int rank_;
  std::FILE* out_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> devnull_{nullptr, &std::fclose};
  std::unique_ptr<Task> task_;
  parallel::RankGroup replicas_;
  Rng rng_;
  std::shared_ptr<Module> model_;
  std::int64_t parameters_ = 0;  // the model's, as built (summary.json's "parameters")
  double lr_;
  std::optional<Checkpoint> checkpoint_;
  Position at_;
  std::unique_ptr<parallel::Strategies> strategies_;
  Schedule schedule_;
  std::int64_t planned_ = 0;
  std::string last_checkpoint_;
  std::vector<std::shared_ptr<StepHook>> hooks_;  // what watches the steps (step_hooks.h)
  std::shared_ptr<FaultInjection> faults_;       // WEFT_STRAGGLER, WEFT_SLOWDOWN (one of hooks_)
  TimelineHook* timeline_ = nullptr;  // --timeline (one of hooks_)
  ProfileHook* profile_ = nullptr;    // --profile (one of hooks_)
  parallel::LossFn loss_fn_;
  std::int64_t rank_state_bytes_ = 0;
  bool said_offload_ = false;
  std::size_t frozen_ = 0;                 // leading layers frozen
  bool caches_ = false;                    // the task keeps the frozen layers' outputs
  std::optional<FreezeRule> freeze_rule_;  // --freeze-converged
  // A pipeline whose frozen blocks changed goes on in another layout after the step
  // (plan_relayout).
  std::optional<Relayout> relayout_;
  // A live parameter-server job's state, received from the servers as soon as a change
  // was agreed (they send it then, unasked): the hand-over or the last checkpoint use it.
  std::optional<parallel::TrainState> agreed_state_;
  RunTotals t_;
};

// A parameter-server rank: it serves the workers until their last step, and checkpoints
// with worker 0 (which saves). In a live job it starts from the state the last generation
// handed over (`image`), and after each step takes part in the ranks' agreement on a
// change: `change` says the one agreed (none: the job ran to its end).
TrainSummary serve_parameters(const TrainOptions& o, const parallel::Job& job, std::FILE* out,
                              parallel::LiveMembership* live = nullptr, std::optional<Checkpoint> image = {},
                              std::optional<parallel::MembershipChange>* change = nullptr);

// A live elastic job (weft launch --elastic): its options checked, then its generations.
void validate_live(const TrainOptions& o);
TrainSummary train_live(const TrainOptions& o, parallel::LiveMembership& live, std::FILE* out);

}  // namespace weft
