#include "weft/comm/wait_policy.h"

#include <algorithm>

namespace weft::comm {

WaitPolicy::Duration WaitPolicy::pause_budget(const WaitSettings& s) const {
  const Duration most = s.pause_us;
  return budget_ == Duration::max() ? most : std::min(budget_, most);
}

WaitPolicy::Action WaitPolicy::next(const WaitSettings& s, Duration idle, TimePoint now) const {
  if (s.shares_core) {
    return idle < s.yield_us && yielding_allowed(now) ? Action::kYield : Action::kSleep;
  }
  return idle < pause_budget(s) ? Action::kPause : Action::kSleep;
}

void WaitPolicy::ended(const WaitSettings& s, Duration idle) {
  if (s.shares_core) return;
  const Duration most = s.pause_us;
  if (most <= Duration::zero()) return;
  const Duration now_budget = pause_budget(s);
  if (idle > most) {
    budget_ = std::max(kMinPause, now_budget / 2);  // later than any pause would wait
  } else if (idle * 2 >= now_budget) {
    // Within reach of the most a wait pauses, and past half the budget: the next wait may
    // need it all, or more.
    budget_ = std::min(most, std::max({kMinPause, now_budget * 2, idle * 2}));
  }
}

void WaitPolicy::yielded(Duration took, TimePoint now, bool strangers) {
  if (took <= kLongYield) {
    no_yield_for_ = kFirstNoYield;
  } else if (strangers) {
    // A second such yield soon after the first: another program keeps taking the core (one
    // alone may be a passing thread: the launcher printing, a kernel worker).
    const bool again = last_strange_yield_ != TimePoint{} && now - last_strange_yield_ <= kStrikeWindow;
    last_strange_yield_ = now;
    if (!again) return;
    no_yield_until_ = now + no_yield_for_;
    no_yield_for_ = std::min(kMostNoYield, no_yield_for_ * 2);
  }
}

}  // namespace weft::comm
