// The simulator's engine: the parts' events run in time order on one thread or several.
//
// The fabric's nodes are shared out among threads (shards); each shard runs the events of
// its nodes from its own queue (engine.h's EventQueue), in time windows no longer than the
// smallest delay of a link between nodes not joined by links without delay (those share a
// shard): nothing a node does reaches another shard's node sooner, so the shards run a
// window side by side and swap what they sent each other at its end (their mail). Events
// run by (time, key), the key being the scheduling node's number and its count of events
// scheduled, and every random draw comes from the drawing node's own streams, so a run is
// the same for any number of threads. Events that act on the whole fabric (node -1:
// samples, failures, rerouting, the flow-level mode's rates) run on the coordinator between
// windows, after the nodes' events of their time (docs/simulator.md, "Parallel engine").
//
// Event kinds are the parts': each part adds its kinds once (add_kind: a plain function and
// the part it acts on, and optionally what to prefetch), and the engine runs an event by its
// kind's entry in the table; no part knows another's kinds. Each shard keeps the run's
// counters that every part adds to (merged at the end); a part that keeps other state per
// thread keeps it itself, by shard().index (threads() + 1 shards: the coordinator last).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "weft/sim/engine.h"
#include "weft/sim/samplers.h"
#include "weft/sim/topology.h"

namespace weft::sim {

// SplitMix64's step: the seed's mixer and the streams' generator.
inline std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A node's random streams: its switch's or NIC's arbitration draws (spraying, adaptive
// routing ties, ECN marks), its links' jitter, and its links' frame losses.
struct RandomStream {  // SplitMix64: eight bytes a stream, for three streams a node
  using result_type = std::uint64_t;
  std::uint64_t state = 0;
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return ~result_type{0}; }
  result_type operator()() {
    const std::uint64_t z = splitmix(state);
    state += 0x9E3779B97F4A7C15ull;
    return z;
  }
};
struct NodeRng {
  RandomStream choice, jitter, loss;
};

class Engine {
 public:
  using RunFn = decltype(EventKind::run);
  using PrefetchFn = decltype(EventKind::prefetch);
  struct Mail {
    Time at;
    std::uint64_t key;
    std::uint64_t arg;
    std::uint32_t kind;
    std::int32_t node;
  };
  struct Shard {
    explicit Shard(const std::vector<EventKind>& kinds) : queue(kinds) {}
    int index = 0;  // its place among the shards (the coordinator: threads())
    EventQueue queue;
    Counters counters;
    std::vector<std::vector<Mail>> outbox;  // per shard: events for its nodes, delivered at the window's end
  };
  enum class End { kFinished, kNothingLeft, kTimeLimit };

  // The nodes' random streams from the run's seed, the window from the topology's links.
  Engine(const Topology& topology, std::uint64_t seed);
  ~Engine();
  // A kind of event: `run_fn(part, arg)` runs it, `prefetch_fn(part, arg, stage)` (optional)
  // loads what it will touch (engine.h). Before begin().
  std::uint32_t add_kind(void* part, RunFn run_fn, PrefetchFn prefetch_fn = nullptr);
  // The shards for `threads` threads (at most one a node), the coordinator current.
  void begin(int threads);
  // Runs windows until `finished()` (asked on the coordinator between windows) holds, no
  // event is left, or the next event is past `time_limit`; `after_window()` runs after
  // each window. The coordinator is current again after it (also when it throws).
  End run(Time time_limit, const std::function<bool()>& finished, const std::function<void()>& after_window);

  // The running thread's shard (the coordinator's outside windows), its clock.
  static Shard& shard() { return *current_; }
  static Time now() { return current_->queue.now(); }
  // Schedules an event of `kind` on `node` (-1: the whole fabric's, run between windows).
  void schedule(Time at, int node, std::uint32_t kind, std::uint64_t arg = 0);
  NodeRng& rng(int node) { return rng_[static_cast<std::size_t>(node)]; }
  const NodeRng& rng(int node) const { return rng_[static_cast<std::size_t>(node)]; }

  bool begun() const { return !shards_.empty(); }
  int threads() const { return static_cast<int>(shards_.size()); }
  // The longest time window: the smallest delay of a link between nodes that are not joined
  // by links without delay (at most 1 us).
  Time window() const { return window_; }
  std::uint64_t windows() const { return windows_; }
  std::uint64_t windows_side_by_side() const { return windows_side_by_side_; }
  std::vector<std::uint64_t> events_per_thread() const;
  // Events run so far on every shard; the latest clock of the nodes' shards.
  std::uint64_t events_run() const;
  Time latest_node_time() const;
  // The latest clock of every shard (where a run that ran out of events ended).
  Time end_time() const;
  // The shards' counters added up.
  Counters counters() const;

 private:
  static Time after(Time t) { return t == kNever ? kNever : t + 1; }  // the end of a window that takes in time t
  void share_nodes(int threads);  // node_shard_: a balanced cut of the fabric
  void run_window(Shard& s);
  void deliver_mail(Shard& s);

  static inline thread_local Shard* current_ = nullptr;
  const Topology& topo_;
  std::vector<EventKind> kinds_;  // (before the shards, whose queues read it)
  std::vector<std::unique_ptr<Shard>> shards_;
  Shard coord_;                       // the events between windows, and set-up
  std::vector<int> node_shard_;
  std::vector<int> atom_;             // per node: the first node of those joined to it without delay
  std::vector<std::uint64_t> seq_;    // per node + 1: events it scheduled (index 0: the coordinator)
  std::vector<NodeRng> rng_;          // per node
  Time window_ = 0;
  Time window_end_ = kNever;          // the running window's end (one thread: cut by a fabric event)
  std::uint64_t windows_ = 0, windows_side_by_side_ = 0;
};

}  // namespace weft::sim
