// WaitPolicy (comm/wait_policy.h): when a waiting rank pauses, yields or sleeps, and how
// its pause adapts to how late its peers come.
#include <gtest/gtest.h>

#include "weft/comm/wait_policy.h"

namespace weft::comm {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using Action = WaitPolicy::Action;

const WaitPolicy::TimePoint kStart = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);

WaitSettings own_cores() { return WaitSettings{microseconds(50), microseconds(2000), false, 2}; }
WaitSettings shared_cores() { return WaitSettings{microseconds(50), microseconds(2000), true, 4}; }

TEST(WaitPolicy, WithACoreEachItPausesThenSleepsAndNeverYields) {
  WaitPolicy p;
  const WaitSettings s = own_cores();
  EXPECT_EQ(p.next(s, microseconds(0), kStart), Action::kPause);
  EXPECT_EQ(p.next(s, microseconds(49), kStart), Action::kPause);
  EXPECT_EQ(p.next(s, microseconds(50), kStart), Action::kSleep);
  EXPECT_EQ(p.next(s, milliseconds(1), kStart), Action::kSleep);
}

TEST(WaitPolicy, WithSharedCoresItYieldsThenSleepsAndNeverPauses) {
  WaitPolicy p;
  const WaitSettings s = shared_cores();
  EXPECT_EQ(p.next(s, microseconds(0), kStart), Action::kYield);
  EXPECT_EQ(p.next(s, microseconds(1999), kStart), Action::kYield);
  EXPECT_EQ(p.next(s, microseconds(2000), kStart), Action::kSleep);
}

TEST(WaitPolicy, LatePeersShrinkThePauseAndPromptOnesGrowItBack) {
  WaitPolicy p;
  const WaitSettings s = own_cores();
  // Peers 5 ms late, wait after wait: the pause halves each time, down to 1 us.
  for (int i = 0; i < 3; ++i) p.ended(s, milliseconds(5));
  EXPECT_EQ(p.pause_budget(s), WaitPolicy::Duration(microseconds(50)) / 8);
  for (int i = 0; i < 20; ++i) p.ended(s, milliseconds(5));
  EXPECT_EQ(p.pause_budget(s), WaitPolicy::kMinPause);
  EXPECT_EQ(p.next(s, microseconds(2), kStart), Action::kSleep);
  // A wait that a longer pause would have caught (20 us, within the 50 us most) grows the
  // budget to cover it at once; quick waits leave it; the most is never passed.
  p.ended(s, microseconds(20));
  EXPECT_EQ(p.pause_budget(s), microseconds(40));
  p.ended(s, microseconds(1));
  EXPECT_EQ(p.pause_budget(s), microseconds(40));
  p.ended(s, microseconds(30));
  EXPECT_EQ(p.pause_budget(s), microseconds(50));
}

TEST(WaitPolicy, NoPauseAtAllWhenTheSettingIsZero) {
  WaitPolicy p;
  WaitSettings s = own_cores();
  s.pause_us = microseconds(0);
  EXPECT_EQ(p.next(s, microseconds(0), kStart), Action::kSleep);
  p.ended(s, microseconds(0));
  EXPECT_EQ(p.pause_budget(s), microseconds(0));
}

TEST(WaitPolicy, LongYieldsToAnotherProgramStopYieldingForAWhileThatGrows) {
  WaitPolicy p;
  const WaitSettings s = shared_cores();
  // A long yield while only the job's own ranks were ready: they had the core; keep yielding.
  p.yielded(milliseconds(3), kStart, false);
  p.yielded(milliseconds(3), kStart + milliseconds(4), false);
  EXPECT_EQ(p.next(s, microseconds(10), kStart + milliseconds(5)), Action::kYield);
  // One long yield to another program may be a passing thread: keep yielding.
  p.yielded(milliseconds(4), kStart, true);
  EXPECT_EQ(p.next(s, microseconds(10), kStart + milliseconds(1)), Action::kYield);
  // A second within 50 ms: sleep for the next 100 ms.
  auto t = kStart + milliseconds(50);
  p.yielded(milliseconds(4), t, true);
  EXPECT_EQ(p.next(s, microseconds(10), t + milliseconds(99)), Action::kSleep);
  EXPECT_EQ(p.next(s, microseconds(10), t + milliseconds(100)), Action::kYield);
  // Two more as soon as it yields again: 200 ms; and so on, up to a second.
  t += milliseconds(100);
  p.yielded(milliseconds(4), t, true);
  EXPECT_EQ(p.next(s, microseconds(10), t + milliseconds(1)), Action::kYield);
  t += milliseconds(4);
  p.yielded(milliseconds(4), t, true);
  EXPECT_EQ(p.next(s, microseconds(10), t + milliseconds(199)), Action::kSleep);
  EXPECT_EQ(p.next(s, microseconds(10), t + milliseconds(200)), Action::kYield);
  for (int i = 0; i < 10; ++i) {
    t += milliseconds(40);
    p.yielded(milliseconds(4), t, true);
  }
  EXPECT_EQ(p.next(s, microseconds(10), t + milliseconds(999)), Action::kSleep);
  EXPECT_EQ(p.next(s, microseconds(10), t + milliseconds(1000)), Action::kYield);
  // A short yield (the core came back at once) starts the count over: 100 ms again.
  t += milliseconds(1000);
  p.yielded(microseconds(20), t, false);
  p.yielded(milliseconds(4), t + milliseconds(1), true);
  EXPECT_EQ(p.next(s, microseconds(10), t + milliseconds(2) + milliseconds(100)), Action::kYield);
  // Two long yields to other programs far apart (over 50 ms): no pause from yielding.
  WaitPolicy q;
  q.yielded(milliseconds(4), kStart, true);
  q.yielded(milliseconds(4), kStart + milliseconds(51), true);
  EXPECT_EQ(q.next(s, microseconds(10), kStart + milliseconds(52)), Action::kYield);
}

}  // namespace
}  // namespace weft::comm
