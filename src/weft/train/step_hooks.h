// What watches the training steps: each feature a hook with its own options and state, which
// the run calls at three points of every step (train/run.cpp's Run::step):
//   before_compute  the batch is ready, the step's computation about to start
//   after_compute   forward, backward and update are done, before the step is timed
//   after_step      the step's figures
//   after_evaluation  the step's evaluation (if one was made after it), before the next step
// The hooks here: the metrics files (--metrics), a straggler and a slower worker
// (FaultInjection), the thread
// governor (--adapt-threads), share balancing (--dp-shares measured), the gradient noise
// scale (--grow-at noise), converged freezing, the stages' speeds, the timeline (--timeline)
// and the per-kernel profile (--profile).
// Converged freezing (--freeze-converged) and the stages' measured speeds (--stage-shares
// measured) decide that the layout changes: they ask, and the run carries it out after the
// step (run_watchers.cpp: the strategies rebuilt, or the pipeline in a new layout).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weft/parallel/rank_group.h"
#include "weft/parallel/strategy.h"
#include "weft/tensor/thread_governor.h"
#include "weft/train/metrics.h"
#include "weft/train/noise_scale.h"
#include "weft/train/options.h"
#include "weft/train/share_balancer.h"
#include "weft/train/step_profile.h"
#include "weft/train/task.h"
#include "weft/train/timeline.h"
#include "weft/util/machine.h"

namespace weft {

struct StepFacts {
  std::int64_t step = 0;                  // the optimizer steps taken, this one included
  const parallel::StepBatch* batch = nullptr;  // this replica's rows
  std::int64_t rows = 0;                  // the global batch's
  std::chrono::steady_clock::time_point started, computing;  // the step's start, its computation's
  double seconds = 0, compute_seconds = 0, exposed_seconds = 0;  // the step; its computation (waits
                                                                 // excluded); communication it waited for
  const parallel::CommStats* comm = nullptr;  // the strategies' figures and the step's spans
  double loss = 0, lr = 0;                // this replica's loss (batch->weight weighs it), the rate
  double comm_seconds = 0;                // the strategies' communication in the step
  std::int64_t units = 0, peak_bytes = 0;  // this replica's samples or tokens; the step's allocation peak
  int threads = 1;                        // the pool's threads in the step
};

// What the run knows once a step's evaluation (if any) was made.
struct StepOutcome {
  std::optional<Evaluation> evaluation;  // made after this step (none: not this step)
  std::optional<double> train_loss;      // with an evaluation: the mean loss since the last one
  std::optional<double> noise_scale;     // --grow-at noise: the estimate so far
};

// A change of layout a hook asks for after a step.
struct LayoutRequest {
  std::size_t freeze_below = 0;        // freeze the layers below this one (0: no change)
  std::vector<double> stage_speeds{};  // re-balance the pipeline's stages for these speeds (empty: no change)
};

class StepHook {
 public:
  virtual ~StepHook() = default;
  virtual void before_compute() {}
  virtual void after_compute(double busy_seconds) {}
  virtual void after_step(const StepFacts& facts) {}
  virtual void after_evaluation(const StepOutcome& outcome) {}
  // Once every hook saw the step: the change this one asks for, if any (asked once).
  virtual std::optional<LayoutRequest> take_layout_request() { return std::nullopt; }
};

// --metrics FILE (and metrics.jsonl in --checkpoint-dir: each rank its own file, metrics.h):
// the run's record when the hook is made, then one record per step with the evaluation made
// after it. A step's loss is the global batch's (the replicas' mean of weighted losses, summed
// over `replicas` in after_step) when the replicas step together (`lockstep`), else this
// worker's own (an asynchronous parameter server's workers are at different steps).
class MetricsHook : public StepHook {
 public:
  MetricsHook(std::unique_ptr<MetricsLog> log, const nlohmann::json& run_record, parallel::RankGroup replicas,
              bool lockstep, std::string unit, std::int64_t steps_per_epoch, std::chrono::steady_clock::time_point start);
  void after_step(const StepFacts& facts) override;
  void after_evaluation(const StepOutcome& outcome) override;

 private:
  std::unique_ptr<MetricsLog> log_;
  parallel::RankGroup replicas_;
  bool lockstep_;
  std::string unit_;
  std::int64_t steps_per_epoch_;
  std::chrono::steady_clock::time_point start_;
  nlohmann::json record_;  // the last step's, written with its evaluation
};

// For tests of what slow workers do (asynchronous parameter servers, overlap, share
// balancing, a pipeline's stage speeds): WEFT_STRAGGLER=RANK:MS makes a rank sleep MS
// milliseconds before each step's computation; WEFT_SLOWDOWN=RANK:FACTOR makes it compute
// FACTOR times slower (it sleeps FACTOR - 1 times each step's computation, or with
// `per_micro_batch` each micro-batch's: a pipeline calls `slow_by`). None when neither names
// this rank. ConfigError on a malformed value.
class FaultInjection : public StepHook {
 public:
  static std::unique_ptr<FaultInjection> from_env(int rank);
  void before_compute() override;
  void after_compute(double busy_seconds) override;
  void per_micro_batch() { per_micro_batch_ = true; }
  void slow_by(double busy_seconds) const;

 private:
  FaultInjection(int straggle_ms, double slowdown) : straggle_ms_(straggle_ms), slowdown_(slowdown) {}
  int straggle_ms_;
  double slowdown_;
  bool per_micro_batch_ = false;
};

// --adapt-threads on: the thread count for the next step, from this one's time and the other
// processes' load (tensor/thread_governor.h); a change said on `out`.
class ThreadGovernorHook : public StepHook {
 public:
  // Changes of the thread count are said on `out` (none: nullptr, --quiet).
  ThreadGovernorHook(int threads, std::FILE* out) : governor_(threads), out_(out) {}
  void after_step(const StepFacts& facts) override;

 private:
  ThreadGovernor governor_;
  OtherCpuLoad other_load_;
  std::FILE* out_;
};

// --dp-shares measured: each window's computation speed, exchanged over the replicas, and the
// task's shares of the global batch moved when they changed (share_balancer.h).
class ShareBalancingHook : public StepHook {
 public:
  ShareBalancingHook(Task& task, parallel::RankGroup replicas, std::int64_t batch, std::FILE* out)
      : task_(task), replicas_(replicas), batch_(batch), out_(out) {}
  void after_step(const StepFacts& facts) override;

 private:
  ShareBalancer balancer_;
  Task& task_;
  parallel::RankGroup replicas_;
  std::int64_t batch_;
  std::FILE* out_;
};

// --grow-at noise: each step's two gradient estimates (a replica's own, the replicas' mean;
// DDP's norms) into the noise scale, which the run carries between generations.
class NoiseScaleHook : public StepHook {
 public:
  // `strategies`: the run's, whichever it holds (a freeze rebuilds them).
  NoiseScaleHook(const std::unique_ptr<parallel::Strategies>& strategies, parallel::RankGroup replicas, NoiseScale& noise)
      : strategies_(strategies), replicas_(replicas), noise_(noise) {}
  void after_step(const StepFacts& facts) override;

 private:
  const std::unique_ptr<parallel::Strategies>& strategies_;
  parallel::RankGroup replicas_;
  NoiseScale& noise_;
};

// --freeze-converged RATIO:STEPS: each leading layer's gradient norm against its weights' (the
// same on every replica after the all-reduce, summed over a pipeline's stages by
// `model_group`: every rank decides alike). The layers that stayed under the ratio for STEPS
// steps in a row from the first unfrozen one on are asked frozen, with the layers without
// parameters after them, while one with parameters still trains. `frozen`: the run's count.
class ConvergedFreezing : public StepHook {
 public:
  ConvergedFreezing(FreezeRule rule, const std::unique_ptr<parallel::Strategies>& strategies, const Task& task,
                    const Module& model, const std::size_t& frozen)
      : rule_(rule), strategies_(strategies), task_(task), model_(model), frozen_(frozen) {}
  void after_step(const StepFacts& facts) override;
  std::optional<LayoutRequest> take_layout_request() override;

 private:
  FreezeRule rule_;
  const std::unique_ptr<parallel::Strategies>& strategies_;
  const Task& task_;
  const Module& model_;
  const std::size_t& frozen_;
  std::vector<std::int64_t> calm_;  // per layer: steps in a row under the ratio
  std::size_t next_ = 0;            // the layers to freeze below (0: none asked)
};

// --stage-shares measured (seed 003 chapter 12: heterogeneous workers): each stage times its
// computation (forward and backward of its micro-batches, not its waits) over the run's
// steps 2-6; every rank then knows each stage's speed, its cost (in the units the partition
// balances) over its time, summed over `world`; when the partition those speeds give
// differs, the hook asks for it. Once per run; said on `out`.
class StageSpeeds : public StepHook {
 public:
  StageSpeeds(const std::unique_ptr<parallel::Strategies>& strategies, parallel::RankGroup world, std::FILE* out)
      : strategies_(strategies), world_(world), out_(out) {}
  void after_step(const StepFacts& facts) override;
  std::optional<LayoutRequest> take_layout_request() override;

 private:
  const std::unique_ptr<parallel::Strategies>& strategies_;
  parallel::RankGroup world_;
  std::FILE* out_;
  int steps_ = 0;
  double busy_ = 0;
  bool done_ = false;
  std::vector<double> speeds_;  // asked for (empty: nothing)
};

// --timeline: the data wait and the strategies' spans of each step (timeline.h).
class TimelineHook : public StepHook {
 public:
  explicit TimelineHook(int rank) : timeline_(rank) {}
  void after_step(const StepFacts& facts) override;
  const Timeline& timeline() const { return timeline_; }

 private:
  Timeline timeline_;
};

// --profile: the kernels' time per kind over the steps (step_profile.h).
class ProfileHook : public StepHook {
 public:
  void before_compute() override { profile_.begin_step(); }
  void after_step(const StepFacts& facts) override;
  const StepProfile& profile() const { return profile_; }

 private:
  StepProfile profile_;
};

}  // namespace weft
