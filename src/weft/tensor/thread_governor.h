// How many threads the kernels should use, from measured step times. On a machine whose
// cores are shared with other work, a step split across T threads waits for the slowest,
// and a core that is half taken can make 2 threads slower than 1 (bench/contention, with
// OpenBLAS's own threading: 4-6x slower, single steps 25x). While other processes keep the
// cores busy (the caller says so each step: util/machine.h), the governor measures the
// candidates 1, 2, 4, ..., T on real steps (`window` steps each, after one settling step
// that is not counted; a count whose step is `slow` times slower than a smaller count's
// median is dropped at once), keeps the most threads unless fewer are at least `margin`
// faster by median, holds the choice for `hold` steps, doubling the hold (up to `max_hold`)
// while the choice stays the same, or `max_hold` at once when all threads were `slow` times
// slower, then measures again; two steps `slow` times slower than the choice measured start
// a new measurement at once. Once the other work is gone for `window` steps it goes back to
// all threads. On a machine nobody else uses it never measures, so it costs nothing there.
// Pure: the caller applies the count (set_active_threads); results do not depend on it
// (thread_pool.h), only the speed does.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace weft {

class ThreadGovernor {
 public:
  struct Options {
    int warmup = 3;        // steps ignored at the start (one-time set-up)
    int window = 5;        // steps measured per candidate
    int hold = 25;         // steps a choice is kept before measuring again
    int max_hold = 200;
    double margin = 0.05;  // fewer threads must be this much faster to be chosen
    double slow = 2;       // this many times slower: measure again, or drop the candidate
  };
  ThreadGovernor(int max_threads, Options options);
  explicit ThreadGovernor(int max_threads) : ThreadGovernor(max_threads, Options{}) {}

  // One step took `seconds` with `threads()` threads, while other processes kept the
  // cores busy or not; returns the count for the next step.
  int observe(double seconds, bool cores_busy);
  int threads() const { return current_; }

  // The last decision that changed the count, as words for the log.
  struct Change {
    int from = 0, to = 0;
    std::string why;
  };
  std::optional<Change> take_change();

 private:
  void start_measuring();
  void decide();

  std::vector<int> candidates_;  // 1, 2, 4, ..., T
  Options o_;
  int current_, chosen_;
  enum class Phase { kWarmup, kMeasuring, kHolding } phase_ = Phase::kWarmup;
  int left_;                       // warm-up or hold steps left
  int free_steps_ = 0;             // consecutive steps without other work
  int slow_steps_ = 0;             // consecutive steps far slower than reference_
  double reference_ = 0;           // the chosen count's median when it was measured
  std::size_t candidate_ = 0;      // being measured
  bool settling_ = false;          // the step after a switch is not counted
  std::vector<double> samples_, medians_;
  int hold_;
  std::optional<Change> change_;
};

}  // namespace weft
