#include "weft/sim/engine.h"

#include "weft/util/error.h"

namespace weft::sim {

void EventQueue::schedule(Time at, EventTarget* target, std::uint32_t kind, std::uint64_t arg) {
  if (at < now_) throw InternalError("simulator: event scheduled in the past");
  heap_.push_back(Event{at, next_order_++, target, arg, kind});
  sift_up(heap_.size() - 1);
}

bool EventQueue::run_one() {
  if (heap_.empty()) return false;
  Event e = heap_.front();
  heap_.front() = heap_.back();
  heap_.pop_back();
  if (!heap_.empty()) sift_down(0);
  now_ = e.at;
  ++events_run_;
  e.target->on_event(e.kind, e.arg);
  return true;
}

void EventQueue::sift_up(std::size_t i) {
  Event e = heap_[i];
  while (i > 0) {
    std::size_t parent = (i - 1) / 4;
    if (!e.before(heap_[parent])) break;
    heap_[i] = heap_[parent];
    i = parent;
  }
  heap_[i] = e;
}

void EventQueue::sift_down(std::size_t i) {
  Event e = heap_[i];
  const std::size_t n = heap_.size();
  for (;;) {
    std::size_t first = 4 * i + 1;
    if (first >= n) break;
    std::size_t best = first;
    std::size_t last = first + 4 < n ? first + 4 : n;
    for (std::size_t c = first + 1; c < last; ++c)
      if (heap_[c].before(heap_[best])) best = c;
    if (!heap_[best].before(e)) break;
    heap_[i] = heap_[best];
    i = best;
  }
  heap_[i] = e;
}

}  // namespace weft::sim
