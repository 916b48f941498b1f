// How a rank waits for a peer's bytes: the choice, round by round, between pausing the core,
// yielding it, and sleeping until the peer's write wakes the rank (a futex doorbell on
// shared memory, poll on a socket). Pure: the executor reads the clock and does what it is
// told; tests drive it with made-up durations.
//
//   pause   a message is often microseconds away: pause the core (no system call) for an
//           adaptive budget, between 1 us and WaitSettings::pause_us. A wait that ended
//           in the budget's second half, or past it but within pause_us, doubles it (or
//           more, to cover that wait); one that lasted longer than pause_us halves it, so
//           a rank whose peers come late (a straggler, a pipeline bubble, a busy machine)
//           soon stops burning the core that the peer, or a neighbour, needs. Not when the
//           job's ranks outnumber the host's cores: then the peer may need this very core.
//   yield   only when the job's ranks outnumber the cores: the core then likely goes to
//           the peer this rank waits for (4 ranks on 2 cores: 8-byte all-reduces 20 us
//           against 140 us when sleeping at once), for WaitSettings::yield_us. A yield that
//           kept the rank off the core for over a millisecond, with more threads ready to
//           run on the machine than the job has ranks on it, means another program took a
//           time slice: yielding would hand every wait's core to it for a whole slice (a
//           4-byte all-reduce then took 4 ms). At the second such yield within 50 ms (one
//           alone may be a passing thread) the policy sleeps instead for a while (100 ms,
//           doubled at each such pair in a row up to a second), then tries again.
//   sleep   on what the peer wakes: a sleeping rank is woken as soon as the bytes come
//           and, having used no processor time, the scheduler runs it before a busy
//           neighbour.
//
// Measured on 2 cores, 64 MiB all-reduces over shared memory, medians of interleaved runs
// (issue "collectives that stay fast on a busy machine"): with a CPU-bound process per core
// beside 2 ranks, 2 ms of yielding before sleeping (the policy before this one) took
// 234-244 ms, this policy 21.7 ms (48 ms with a 50 us most pause: the most is 200 us); on
// the idle machine 8.88 ms before, 8.79 ms now (10.1 ms with a 50 us most: the 1 MiB
// ring drains in about 100 us, and a waiter that slept sooner lost the wake-up's time).
#pragma once

#include <chrono>

namespace weft::comm {

struct WaitSettings {
  std::chrono::microseconds pause_us{200};  // WEFT_SPIN_US: the most a wait pauses the core
  std::chrono::microseconds yield_us{2000};  // WEFT_YIELD_US: yielding, with shared cores
  bool shares_core = false;  // the job's ranks on this host outnumber their cores
  int ranks_on_host = 1;     // the job's ranks on this host
};

class WaitPolicy {
 public:
  using Duration = std::chrono::nanoseconds;
  using TimePoint = std::chrono::steady_clock::time_point;
  enum class Action { kPause, kYield, kSleep };

  static constexpr Duration kMinPause = std::chrono::microseconds(1);
  static constexpr Duration kLongYield = std::chrono::milliseconds(1);
  static constexpr Duration kFirstNoYield = std::chrono::milliseconds(100);
  static constexpr Duration kMostNoYield = std::chrono::seconds(1);
  static constexpr Duration kStrikeWindow = std::chrono::milliseconds(50);

  // What to do after `idle` without progress, at `now`.
  Action next(const WaitSettings& s, Duration idle, TimePoint now) const;
  // The wait ended (something moved) after `idle`.
  void ended(const WaitSettings& s, Duration idle);
  // One yield kept the rank off the core for `took`; `strangers`: other programs' threads
  // were ready to run just after (asked only when `took` is over kLongYield).
  void yielded(Duration took, TimePoint now, bool strangers);

  Duration pause_budget(const WaitSettings& s) const;
  bool yielding_allowed(TimePoint now) const { return now >= no_yield_until_; }

 private:
  Duration budget_{Duration::max()};  // max(): not adapted yet (the settings' pause)
  TimePoint no_yield_until_{};
  Duration no_yield_for_{kFirstNoYield};  // the next pause from yielding
  TimePoint last_strange_yield_{};        // the last long yield to another program
};

// Counts of what a thread's waits did, since it started (tests read them: a late peer
// must put the waiter to sleep, not keep it on the core).
struct WaitCounts {
  long pauses = 0;
  long yields = 0;
  long sleeps = 0;
  long long_yields = 0;          // yields that kept the rank off the core for over 1 ms
  long yields_to_strangers = 0;  // of those, with other programs ready to run
};

}  // namespace weft::comm
