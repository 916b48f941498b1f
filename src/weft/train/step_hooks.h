// What watches the training steps: each feature a hook with its own options and state, which
// the run calls at three points of every step (train/run.cpp's Run::step):
//   before_compute  the batch is ready, the step's computation about to start
//   after_compute   forward, backward and update are done, before the step is timed
//   after_step      the step's figures
// The hooks here: a straggler and a slower worker for tests (FaultInjection), the thread
// governor (--adapt-threads), share balancing (--dp-shares measured), the gradient noise
// scale (--grow-at noise), the timeline (--timeline) and the per-kernel profile (--profile).
// Converged freezing and the stages' measured speeds change the layout, and stay the run's
// (run_watchers.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "weft/parallel/rank_group.h"
#include "weft/parallel/strategy.h"
#include "weft/tensor/thread_governor.h"
#include "weft/train/noise_scale.h"
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
};

class StepHook {
 public:
  virtual ~StepHook() = default;
  virtual void before_compute() {}
  virtual void after_compute(double busy_seconds) {}
  virtual void after_step(const StepFacts& facts) {}
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
