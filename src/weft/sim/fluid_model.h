// The flow-level mode's fluid (docs/simulator.md, "Flow-level mode"): parts of messages that
// cross fixed paths of ports at their max-min fair rates (max_min.h), each part advancing at
// its rate until the set of parts changes. Incremental: a change (a part added, a part done)
// recomputes only the parts it can reach, those joined to it through shared ports
// (transitively), since max-min rates of parts that share no port with them do not depend on
// them; a part whose new rate equals its old one within a relative 1e-12 keeps it (and its
// finish); a part's bytes are settled (counted) only when its rate changes and when it ends.
//
// Contract: capacity[port] > 0 (payload bytes/s); paths name ports in [0, capacity.size()).
// Times are the engine's picoseconds; every call's `now` is at or after the previous call's.
// A part is done at its exact finish or, with tolerance F > 0, at the first complete() at or
// after the time its rest would take under F of the time it has been going (its last bytes
// early by at most that fraction; finishes close in time are taken together). `moved(part,
// bytes)` is called with each part's bytes as they are settled. Single-threaded.
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

#include "weft/sim/engine.h"

namespace weft::sim {

class FluidModel {
 public:
  using Moved = std::function<void(int part, double bytes)>;
  FluidModel(std::vector<double> capacity, double tolerance, Moved moved);

  // A part of `bytes` over the ports path[0 .. n) from `now`, at rate 0 until recompute().
  // Returns its id (ids of done parts are reused).
  int add(const std::int32_t* path, std::size_t n, double bytes, Time now);
  // Removes the parts done by `now` and calls done(id) for each (their bytes settled): those
  // at their exact finish first, then those the tolerance lets end early, each in order of
  // time then id; done may add parts. Returns how many were done.
  int complete(Time now, const std::function<void(int part)>& done);
  // New rates for the parts the changes since the last call reach; false when none changed.
  bool recompute(Time now);
  // When the next part finishes at its current rate (kNever when none is moving).
  Time next_finish();
  // Counts what every live part moved by `now` (a run that ends with parts in flight).
  void settle_all(Time now);

  const std::int32_t* path(int part) const { return path_.data() + parts_[static_cast<std::size_t>(part)].path_begin; }
  std::uint32_t path_length(int part) const { return parts_[static_cast<std::size_t>(part)].path_len; }
  double rate(int part) const { return parts_[static_cast<std::size_t>(part)].rate; }
  std::size_t live() const { return live_; }
  std::uint64_t recomputations() const { return recomputations_; }
  std::uint64_t parts_recomputed() const { return parts_recomputed_; }

 private:
  struct Part {
    std::uint32_t path_begin = 0, path_len = 0;  // ports in path_, their places in on_port_ in place_
    double remaining = 0, rate = 0;              // payload bytes left at `since`, bytes/s
    Time since = 0, start = 0;
    std::uint32_t version = 0;                   // heap entries of another version are stale
    bool live = false, reached = false;
  };
  struct Due {
    Time at;
    int part;
    std::uint32_t version;
    bool operator>(const Due& o) const { return at != o.at ? at > o.at : part > o.part; }
  };
  using Heap = std::priority_queue<Due, std::vector<Due>, std::greater<>>;
  void settle(int part, Time now);
  void remove(int part);
  void compact_paths();
  bool valid(const Due& d) const;

  std::vector<double> capacity_;
  double tolerance_;
  Moved moved_;
  std::vector<Part> parts_;
  std::vector<int> free_;
  std::vector<std::int32_t> path_;
  std::vector<std::uint32_t> place_;  // each path entry's index in its port's on_port_ list
  std::size_t dead_path_ = 0;
  struct User {
    int part;
    std::uint32_t hop;
  };
  std::vector<std::vector<User>> on_port_;
  std::vector<int> added_;                 // parts added since the last recompute
  std::vector<std::int32_t> freed_ports_;  // ports of parts done since the last recompute
  Heap finish_, tolerance_due_;
  std::size_t live_ = 0;
  std::uint64_t recomputations_ = 0, parts_recomputed_ = 0;
  // Scratch of recompute(), kept between calls.
  std::vector<char> port_seen_;
  std::vector<std::int32_t> local_of_port_;
};

}  // namespace weft::sim
