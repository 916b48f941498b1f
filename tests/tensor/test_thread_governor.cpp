// The thread governor against synthetic step times: it keeps all threads on a free machine
// (spending few steps measuring fewer), drops to fewer when they are faster (busy cores),
// comes back when the cores are free again, and changing the count changes no result.
#include <gtest/gtest.h>

#include <functional>

#include "weft/util/error.h"

#include "weft/tensor/linalg.h"
#include "weft/tensor/ops.h"
#include "weft/tensor/rng.h"
#include "weft/tensor/tensor.h"
#include "weft/tensor/thread_governor.h"
#include "weft/tensor/thread_pool.h"

using namespace weft;

namespace {
// Runs `steps` steps whose time is time(step, threads), with other work on the cores while
// busy(step); returns the threads used per step.
std::vector<int> run(ThreadGovernor& g, int steps, const std::function<double(int, int)>& time,
                     const std::function<bool(int)>& busy = [](int) { return true; }) {
  std::vector<int> used;
  for (int s = 0; s < steps; ++s) {
    used.push_back(g.threads());
    g.observe(time(s, g.threads()), busy(s));
  }
  return used;
}
int count(const std::vector<int>& v, int x, std::size_t from = 0) {
  int n = 0;
  for (std::size_t i = from; i < v.size(); ++i) n += v[i] == x;
  return n;
}
}  // namespace

TEST(ThreadGovernor, NeverMeasuresOnAFreeMachine) {
  ThreadGovernor g(2);
  auto used = run(g, 3000, [](int, int t) { return t == 2 ? 0.010 : 0.018; }, [](int) { return false; });
  EXPECT_EQ(used, std::vector<int>(3000, 2));
  EXPECT_FALSE(g.take_change().has_value());
}

TEST(ThreadGovernor, KeepsAllThreadsWhileTheyStayFasterUnderLoadAndMeasuresRarely) {
  ThreadGovernor g(2);
  auto used = run(g, 3000, [](int, int t) { return t == 2 ? 0.012 : 0.018; });
  EXPECT_EQ(used.back(), 2);
  EXPECT_FALSE(g.take_change().has_value());
  EXPECT_LT(count(used, 1), 3000 * 0.04);  // measuring 1 thread: under 4% of the steps
}

TEST(ThreadGovernor, UsesFewerThreadsWhileTheyAreFasterAndComesBackWhenTheWorkLeaves) {
  ThreadGovernor g(2);
  // Other work for the first 400 steps: 2 threads take 30 ms, 1 thread 20 ms; then free.
  auto used = run(g, 1000, [](int s, int t) { return s < 400 ? (t == 2 ? 0.030 : 0.020) : (t == 2 ? 0.010 : 0.018); },
                  [](int s) { return s < 400; });
  auto change = g.take_change();  // the last change: back to 2
  ASSERT_TRUE(change.has_value());
  EXPECT_EQ(change->from, 1);
  EXPECT_EQ(change->to, 2);
  EXPECT_NE(change->why.find("no other work"), std::string::npos) << change->why;
  // Within the first 20 steps it found 1 faster, and used 1 nearly always until the work left.
  EXPECT_EQ(used[20], 1);
  EXPECT_GT(count(std::vector<int>(used.begin(), used.begin() + 400), 1), 340);
  // Back to 2 within a few steps of the work leaving, and no measuring after.
  EXPECT_EQ(used[410], 2);
  EXPECT_EQ(count(used, 1, 410), 0);
}

TEST(ThreadGovernor, AStepFarSlowerThanMeasuredMeasuresAgainAndDropsTheSlowCountEarly) {
  ThreadGovernor g(2);
  // Under load 2 threads are faster (10 ms against 15) until step 200, when their steps
  // become 250 ms (threads that wait for a descheduled one); 1 thread stays at 15 ms.
  auto slow = [](int s, int t) { return t == 1 ? 0.015 : s < 200 ? 0.010 : 0.250; };
  auto used = run(g, 400, slow);
  EXPECT_EQ(used[150], 2);
  int slow_steps = 0;
  for (int s = 200; s < 400; ++s) slow_steps += used[s] == 2;
  // Two to notice and one to measure; 2 threads were far slower, so 1 is kept for long.
  EXPECT_LE(slow_steps, 3);
  EXPECT_EQ(used.back(), 1);
}

TEST(ThreadGovernor, NeedsAMarginAndMeasuresEveryHalving) {
  ThreadGovernor same(2);
  run(same, 500, [](int, int t) { return t == 2 ? 0.0100 : 0.0099; });  // 1% faster: not enough
  EXPECT_EQ(same.threads(), 2);
  ThreadGovernor four(4);
  auto used = run(four, 200, [](int, int t) { return t == 4 ? 0.040 : t == 2 ? 0.015 : 0.025; });
  EXPECT_EQ(used.back(), 2);
  EXPECT_GT(count(used, 1), 0);  // 1 was measured too
  ThreadGovernor one(1);
  EXPECT_EQ(run(one, 100, [](int, int) { return 0.01; }), std::vector<int>(100, 1));
}

TEST(ThreadGovernor, TheActiveThreadCountChangesNoResult) {
  set_num_threads(2);
  Rng rng(3);
  Tensor a = randn({300, 257}, rng), b = randn({257, 129}, rng);
  set_active_threads(2);
  Tensor two = ops::add(ops::matmul(a, b), ops::relu(ops::matmul(a, b)));
  set_active_threads(1);
  EXPECT_EQ(get_active_threads(), 1);
  Tensor one = ops::add(ops::matmul(a, b), ops::relu(ops::matmul(a, b)));
  set_active_threads(2);
  EXPECT_TRUE(ops::equal(one, two));
  EXPECT_THROW(set_active_threads(3), ConfigError);
  EXPECT_THROW(set_active_threads(0), ConfigError);
}
