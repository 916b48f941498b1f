#include "weft/sim/engine.h"

#include <algorithm>

#include "weft/util/error.h"

namespace weft::sim {

namespace {

constexpr std::size_t kSlotMask = EventQueue::kBuckets - 1;
constexpr std::size_t kKeptPerSlot = 256;

// std::push_heap and friends keep the greatest first: order by "after" for a min-heap.
template <class E>
bool after(const E& a, const E& b) {
  return b.before(a);
}

}  // namespace

EventQueue::EventQueue(const std::vector<EventKind>& kinds) : kinds_(kinds), wheel_(kBuckets), occupied_(kBuckets / 64, 0) {}

void EventQueue::place(const Event& e) {
  const std::uint64_t b = e.at >> kBucketShift;
  if (b - bucket_ < kBuckets) {
    const std::size_t slot = b & kSlotMask;
    wheel_[slot].push_back(e);
    occupied_[slot / 64] |= std::uint64_t{1} << (slot % 64);
    ++on_wheel_;
  } else {
    far_.push_back(e);
    std::push_heap(far_.begin(), far_.end(), after<Event>);
  }
}

void EventQueue::schedule(Time at, std::uint32_t kind, std::uint64_t arg) {
  insert(Event{at, next_order_++, arg, kind, -1});
}

void EventQueue::schedule(Time at, std::uint64_t key, int node, std::uint32_t kind, std::uint64_t arg) {
  insert(Event{at, key, arg, kind, node});
}

void EventQueue::insert(const Event& e) {
  const Time at = e.at;
  if (at < now_) throw InternalError("simulator: event scheduled in the past");
  ++size_;
  if ((at >> kBucketShift) == bucket_) {
    late_.push_back(e);
    std::push_heap(late_.begin(), late_.end(), after<Event>);
  } else {
    place(e);
  }
}

std::uint64_t EventQueue::next_bucket() const {
  std::uint64_t next;
  if (on_wheel_ == 0) {
    next = far_.front().at >> kBucketShift;  // the wheel is empty: jump to the far events
  } else {
    // The first occupied slot after the current one, going round the wheel once.
    const std::size_t start = (bucket_ + 1) & kSlotMask;
    std::size_t word = start / 64;
    std::uint64_t bits = occupied_[word] & (~std::uint64_t{0} << (start % 64));
    std::size_t scanned = 0;
    while (bits == 0) {
      word = (word + 1) % occupied_.size();
      bits = occupied_[word];
      if (++scanned > occupied_.size()) throw InternalError("simulator: event wheel lost its events");
    }
    const std::size_t slot = word * 64 + static_cast<std::size_t>(__builtin_ctzll(bits));
    next = bucket_ + ((slot - bucket_) & kSlotMask);
  }
  return next;
}

Time EventQueue::next_time() const {
  if (size_ == 0) return kNever;
  if (cursor_ < current_.size() || !late_.empty()) {
    Time t = kNever;
    if (cursor_ < current_.size()) t = current_[cursor_].at;
    if (!late_.empty()) t = std::min(t, late_.front().at);
    return t;
  }
  if (on_wheel_ == 0) return far_.front().at;
  Time t = kNever;  // the next occupied bucket's earliest (its events are not sorted yet)
  for (const Event& e : wheel_[next_bucket() & kSlotMask]) t = std::min(t, e.at);
  return t;
}

void EventQueue::advance(std::uint64_t next) {
  current_.clear();
  cursor_ = 0;
  bucket_ = next;
  // The wheel now reaches kBuckets past the new bucket: far events within it move on.
  while (!far_.empty() && (far_.front().at >> kBucketShift) - bucket_ < kBuckets) {
    std::pop_heap(far_.begin(), far_.end(), after<Event>);
    const Event e = far_.back();
    far_.pop_back();
    place(e);
  }
  const std::size_t slot = bucket_ & kSlotMask;
  current_.swap(wheel_[slot]);
  // A slot keeps the storage of an ordinary bucket; a burst's (thousands of timers due at
  // once) is given back, or the wheel would come to hold one per slot.
  if (wheel_[slot].capacity() > kKeptPerSlot) std::vector<Event>().swap(wheel_[slot]);
  occupied_[slot / 64] &= ~(std::uint64_t{1} << (slot % 64));
  on_wheel_ -= current_.size();
  std::sort(current_.begin(), current_.end(), [](const Event& a, const Event& b) { return a.before(b); });
}

bool EventQueue::run_one(Time before) {
  if (size_ == 0) return false;
  if (cursor_ == current_.size() && late_.empty()) {
    const std::uint64_t next = next_bucket();
    if ((next << kBucketShift) >= before) return false;  // all of it at or after `before`
    advance(next);
  }
  Event e;
  if (!late_.empty() && (cursor_ == current_.size() || late_.front().before(current_[cursor_]))) {
    if (late_.front().at >= before) return false;
    std::pop_heap(late_.begin(), late_.end(), after<Event>);
    e = late_.back();
    late_.pop_back();
  } else {
    if (current_[cursor_].at >= before) return false;
    e = current_[cursor_++];
  }
  --size_;
  const EventKind* kinds = kinds_.data();
  for (std::size_t stage = 0; stage < kPrefetchStages; ++stage) {
    const std::size_t ahead = cursor_ + (kPrefetchStages - stage) * kLookahead;
    if (ahead < current_.size()) {
      const Event& a = current_[ahead];
      if (const EventKind& k = kinds[a.kind]; k.prefetch) k.prefetch(k.part, a.arg, static_cast<int>(stage));
    }
  }
  now_ = e.at;
  node_ = e.node;
  ++events_run_;
  const EventKind& k = kinds[e.kind];
  k.run(k.part, e.arg);
  return true;
}

}  // namespace weft::sim
