#include "weft/tensor/stealing_ranges.h"

#include "weft/util/error.h"

namespace weft {

namespace {

constexpr std::uint64_t pack(std::uint64_t front, std::uint64_t end) { return front << 32 | end; }
constexpr std::uint64_t front_of(std::uint64_t word) { return word >> 32; }
constexpr std::uint64_t end_of(std::uint64_t word) { return word & 0xffffffffu; }

}  // namespace

StealingRanges::StealingRanges(std::int64_t n, int lanes) : ranges_(new Range[lanes > 0 ? lanes : 1]), lanes_(lanes) {
  WEFT_CHECK(n >= 0 && n < (std::int64_t{1} << 32) && lanes >= 1,
             "StealingRanges: " + std::to_string(n) + " units in " + std::to_string(lanes) + " lanes");
  for (int l = 0; l < lanes; ++l)
    ranges_[l].word.store(pack(static_cast<std::uint64_t>(l * n / lanes), static_cast<std::uint64_t>((l + 1) * n / lanes)),
                          std::memory_order_relaxed);
}

std::int64_t StealingRanges::next(int lane) {
  std::atomic<std::uint64_t>& own = ranges_[lane].word;
  for (;;) {
    // The own front.
    for (std::uint64_t w = own.load(std::memory_order_acquire); front_of(w) < end_of(w);)
      if (own.compare_exchange_weak(w, pack(front_of(w) + 1, end_of(w)), std::memory_order_acq_rel))
        return static_cast<std::int64_t>(front_of(w));
    // Empty: the back half (rounded up) of the lane with the most left becomes this lane's
    // range. (Only the owner makes an empty range non-empty: thieves take from non-empty ones.)
    int victim = -1;
    std::uint64_t most = 0, word = 0;
    for (int l = 0; l < lanes_; ++l) {
      const std::uint64_t w = ranges_[l].word.load(std::memory_order_acquire);
      if (front_of(w) < end_of(w) && end_of(w) - front_of(w) > most) victim = l, most = end_of(w) - front_of(w), word = w;
    }
    if (victim < 0) return -1;
    const std::uint64_t keep_end = front_of(word) + most / 2;
    if (ranges_[victim].word.compare_exchange_strong(word, pack(front_of(word), keep_end), std::memory_order_acq_rel))
      own.store(pack(keep_end, end_of(word)), std::memory_order_release);
  }
}

bool StealingRanges::next_own(int lane, std::int64_t unit) const {
  const std::uint64_t w = ranges_[lane].word.load(std::memory_order_relaxed);
  return static_cast<std::int64_t>(front_of(w)) == unit && front_of(w) < end_of(w);
}

}  // namespace weft
