// The discrete-event engine of the fabric simulator.
//
// Time is an integer count of picoseconds. An event is (time, key, kind, arg, node);
// events run by time, and events at the same time by key, so a run is a pure function of
// its inputs and seed. The key is the caller's (the fabric gives each event the scheduling
// node's number and that node's count of events scheduled, an order that does not depend
// on which thread runs which node); schedule() without one keys events in the order they
// are scheduled. `node` is carried for the part (which node the event acts on). An event
// runs by its kind's entry in the table the queue was made with (EventKind).
//
// The queue is a calendar (a timing wheel): time is cut into buckets of 2^kBucketShift ps,
// and the next kBuckets buckets each hold their events unsorted; the earliest bucket is
// sorted when its turn comes and run front to back (events scheduled into it meanwhile wait
// in a small heap beside it), events past the wheel wait in a heap and move onto the wheel
// as it turns. A packet-level run schedules nearly all its events within a few microseconds
// of now, so scheduling is an append and running is a walk along a sorted array, and the
// events a few places ahead are known: the engine asks their kinds to prefetch what they
// will touch (EventKind::prefetch) while the current one runs, in stages: what the event
// names (stage 0, kPrefetchStages x kLookahead events ahead), then what that leads to
// (stage 1, kLookahead events later, when stage 0's lines are in), and so on. Same order
// as one heap by (time, key); scheduling allocates only while buckets grow to the run's
// size (and for a burst larger than a bucket keeps). run_one(before) runs only events
// earlier than `before`: the fabric's parallel engine runs each thread's queue to the end
// of a time window, and next_time() tells where the next window starts.
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

// What runs the events of one kind: a plain function and the part it acts on, and
// optionally a hint that such an event runs soon: start loading what it will read (stage 0:
// what the event names; each later stage: what the stage before loaded leads to; changes
// nothing). `kind` in an event is its place in the queue's table of kinds.
struct EventKind {
  void* part = nullptr;
  void (*run)(void* part, std::uint64_t arg) = nullptr;
  void (*prefetch)(const void* part, std::uint64_t arg, int stage) = nullptr;
};

class EventQueue {
 public:
  static constexpr int kBucketShift = 13;        // 8.192 ns a bucket
  static constexpr std::size_t kBuckets = 1 << 12;  // the wheel: 33.6 us ahead
  static constexpr std::size_t kLookahead = 4;   // events between prefetch stages
  static constexpr std::size_t kPrefetchStages = 3;

  // Events run by their kind's entry in `kinds` (which may grow, and must outlive the queue).
  explicit EventQueue(const std::vector<EventKind>& kinds);
  // Keyed in the order of scheduling (after every event already scheduled so).
  void schedule(Time at, std::uint32_t kind, std::uint64_t arg = 0);
  // With the caller's key and node; an earlier key runs first among events at one time.
  void schedule(Time at, std::uint64_t key, int node, std::uint32_t kind, std::uint64_t arg);
  bool empty() const { return size_ == 0; }
  std::size_t size() const { return size_; }
  Time now() const { return now_; }
  int node() const { return node_; }  // the node of the event running (or run last)
  // The earliest event's time, kNever when there is none. Runs nothing.
  Time next_time() const;
  // Runs the earliest event if it is earlier than `before`; returns whether it ran one.
  bool run_one(Time before = kNever);
  std::uint64_t events_run() const { return events_run_; }

 private:
  struct Event {  // 32 bytes
    Time at;
    std::uint64_t key;
    std::uint64_t arg;
    std::uint32_t kind;
    std::int32_t node;
    bool before(const Event& o) const { return at < o.at || (at == o.at && key < o.key); }
  };
  static_assert(sizeof(Event) == 32, "an event is 32 bytes (two to a cache line)");
  // The next bucket that holds events (or, with the wheel empty, the first far event's);
  // requires the current bucket to be run and some event left.
  std::uint64_t next_bucket() const;
  // Moves to bucket `next`, brings far events onto the wheel and sorts the new current bucket.
  void advance(std::uint64_t next);
  void insert(const Event& e);
  void place(const Event& e);  // onto the wheel or into the far heap, by its bucket

  const std::vector<EventKind>& kinds_;
  std::vector<Event> current_;   // the current bucket, sorted; run from cursor_
  std::size_t cursor_ = 0;
  std::vector<Event> late_;      // heap: scheduled into the current bucket after its sort
  std::vector<std::vector<Event>> wheel_;
  std::vector<std::uint64_t> occupied_;  // a bit per wheel slot that holds events
  std::size_t on_wheel_ = 0;
  std::vector<Event> far_;       // heap: events at or past the wheel's end
  std::uint64_t bucket_ = 0;     // the current bucket's number (time >> kBucketShift)
  std::size_t size_ = 0;
  std::uint64_t next_order_ = 0;
  std::uint64_t events_run_ = 0;
  Time now_ = 0;
  int node_ = -1;
};

}  // namespace weft::sim
