// Units [0, n) dealt to `lanes` threads as contiguous ranges, one lane each: a lane's owner
// takes its range's units front to back, so it knows the unit it takes next and can fetch
// that unit's data ahead while it computes. A lane whose range ran out takes the back half of
// the lane with the most left as its new range (work stealing), and goes on front to back in
// it: a thread held off its core leaves its units to the others instead of holding the whole
// job up, and the thief's units too come in order. Every unit is taken exactly once, whatever
// the interleaving; which lane takes which depends on the timing, so a caller computes each
// output within one unit. Lock-free: one 64-bit word per lane (its range's front and end),
// each on its own cache line.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace weft {

class StealingRanges {
 public:
  // n < 2^32 units, 1 <= lanes; lane l owns [l * n / lanes, (l + 1) * n / lanes).
  StealingRanges(std::int64_t n, int lanes);

  // The next unit for lane `lane`'s owner: its range's front, after a steal when the range
  // was empty; -1 when no lane has any left.
  std::int64_t next(int lane);
  // Whether `unit` is still the front of lane `lane`'s range, not taken (the unit its owner
  // takes next, unless a thief takes it first).
  bool next_own(int lane, std::int64_t unit) const;

 private:
  struct alignas(64) Range {
    std::atomic<std::uint64_t> word{0};  // front << 32 | end
  };
  std::unique_ptr<Range[]> ranges_;
  int lanes_;
};

}  // namespace weft
