// The discrete-event engine of the fabric simulator.
//
// Time is an integer count of picoseconds. An event is (time, order, target, kind, arg);
// events at the same time run in the order they were scheduled, so a run is a pure
// function of its inputs and seed. The queue is a 4-ary min-heap of small plain structs:
// scheduling never allocates once the heap has grown to the run's working size.
#pragma once

#include <cstdint>
#include <vector>

namespace weft::sim {

using Time = std::uint64_t;  // picoseconds
constexpr Time kPs = 1, kNs = 1000, kUs = 1000 * kNs, kMs = 1000 * kUs, kSec = 1000 * kMs;
constexpr Time kNever = ~Time{0};

inline double to_us(Time t) { return static_cast<double>(t) / static_cast<double>(kUs); }
inline Time from_us(double us) { return static_cast<Time>(us * static_cast<double>(kUs) + 0.5); }
inline double to_seconds(Time t) { return static_cast<double>(t) / static_cast<double>(kSec); }

// Something that receives events. `kind` and `arg` are the target's own encoding.
class EventTarget {
 public:
  virtual ~EventTarget() = default;
  virtual void on_event(std::uint32_t kind, std::uint64_t arg) = 0;
};

class EventQueue {
 public:
  void schedule(Time at, EventTarget* target, std::uint32_t kind, std::uint64_t arg = 0);
  bool empty() const { return heap_.empty(); }
  std::size_t size() const { return heap_.size(); }
  Time now() const { return now_; }
  // Runs the earliest event; returns false when there is none.
  bool run_one();
  std::uint64_t events_run() const { return events_run_; }

 private:
  struct Event {
    Time at;
    std::uint64_t order;
    EventTarget* target;
    std::uint64_t arg;
    std::uint32_t kind;
    bool before(const Event& o) const { return at < o.at || (at == o.at && order < o.order); }
  };
  void sift_up(std::size_t i);
  void sift_down(std::size_t i);

  std::vector<Event> heap_;
  std::uint64_t next_order_ = 0;
  std::uint64_t events_run_ = 0;
  Time now_ = 0;
};

}  // namespace weft::sim
