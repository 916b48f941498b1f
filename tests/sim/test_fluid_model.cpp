// The flow-level mode's fluid (sim/fluid_model.h): incremental recomputation against the
// whole max-min computation, and a part that starts while others run.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "weft/sim/fluid_model.h"
#include "weft/sim/max_min.h"

namespace weft::sim {
namespace {

TEST(FluidModel, APartAddedWhileAnotherRunsMovesAtOnce) {
  // Two parts on disjoint ports of 1e9 bytes/s: the second, added 3 us after the first,
  // finishes 3 us after it (an update pending for the first's finish does not hold it).
  double moved = 0;
  FluidModel fluid({1e9, 1e9}, 0, [&](int, double b) { moved += b; });
  const std::int32_t a = 0, b = 1;
  fluid.add(&a, 1, 1e6, 0);
  ASSERT_TRUE(fluid.recompute(0));
  EXPECT_EQ(fluid.next_finish(), 1000 * kUs);
  fluid.add(&b, 1, 1e6, 3 * kUs);
  ASSERT_TRUE(fluid.recompute(3 * kUs));
  EXPECT_EQ(fluid.recomputations(), 2u);
  EXPECT_EQ(fluid.parts_recomputed(), 2u) << "the second part shares no port with the first: it alone is recomputed";
  std::vector<int> done;
  EXPECT_EQ(fluid.complete(1000 * kUs, [&](int p) { done.push_back(p); }), 1);
  EXPECT_EQ(fluid.next_finish(), 1003 * kUs);
  EXPECT_EQ(fluid.complete(1003 * kUs, [&](int p) { done.push_back(p); }), 1);
  EXPECT_EQ(done, (std::vector<int>{0, 1}));
  EXPECT_DOUBLE_EQ(moved, 2e6);
  EXPECT_EQ(fluid.next_finish(), kNever);
}

TEST(FluidModel, ALateArrivalTakesItsShareAndTheFirstSlowsDown) {
  // One port of 1e9 bytes/s: 1 MB from 0, another 1 MB from 200 us. The first moves 200 kB
  // alone, then both share: the first ends at 200 + 2 x 800 = 1,800 us, the second at 2,000.
  FluidModel fluid({1e9}, 0, [](int, double) {});
  const std::int32_t port = 0;
  fluid.add(&port, 1, 1e6, 0);
  fluid.recompute(0);
  fluid.add(&port, 1, 1e6, 200 * kUs);
  fluid.recompute(200 * kUs);
  EXPECT_DOUBLE_EQ(fluid.rate(0), 5e8);
  EXPECT_DOUBLE_EQ(fluid.rate(1), 5e8);
  EXPECT_EQ(fluid.next_finish(), 1800 * kUs);
  fluid.complete(1800 * kUs, [](int) {});
  fluid.recompute(1800 * kUs);
  EXPECT_DOUBLE_EQ(fluid.rate(1), 1e9);
  EXPECT_EQ(fluid.next_finish(), 2000 * kUs);
}

TEST(FluidModel, IncrementalRatesEqualTheWholeComputation) {
  // Random arrivals and completions over 40 ports: after each change the rates of every
  // live part equal max-min over all of them, although only the reached parts were
  // recomputed; and the bytes moved add up to the bytes added.
  std::mt19937_64 rng(11);
  const int ports = 40;
  std::vector<double> capacity(ports);
  for (double& c : capacity) c = 1e9 * static_cast<double>(1 + rng() % 8);
  double moved = 0, added = 0;
  FluidModel fluid(capacity, 0, [&](int, double b) { moved += b; });
  std::map<int, std::vector<std::int32_t>> live;
  Time now = 0;
  std::uint64_t reached = 0, whole = 0;
  for (int step = 0; step < 400; ++step) {
    now += static_cast<Time>(rng() % (50 * kUs));
    fluid.complete(now, [&](int p) { live.erase(p); });
    if (rng() % 3 != 0 || live.empty()) {
      std::vector<std::int32_t> path;
      const int hops = 1 + static_cast<int>(rng() % 3);
      while (static_cast<int>(path.size()) < hops) {
        const auto p = static_cast<std::int32_t>(rng() % ports);
        if (std::find(path.begin(), path.end(), p) == path.end()) path.push_back(p);
      }
      const double bytes = 1e4 * static_cast<double>(1 + rng() % 100);
      added += bytes;
      live[fluid.add(path.data(), path.size(), bytes, now)] = path;
    }
    if (!fluid.recompute(now)) continue;
    FlowPaths all;
    std::vector<int> ids;
    for (const auto& [id, path] : live) {
      all.add(path.data(), path.size());
      ids.push_back(id);
    }
    const std::vector<double> expect = max_min_rates(all, capacity);
    for (std::size_t i = 0; i < ids.size(); ++i) EXPECT_NEAR(fluid.rate(ids[i]), expect[i], expect[i] * 1e-12) << "step " << step;
    whole += ids.size();
    ASSERT_EQ(fluid.live(), live.size());
  }
  reached = fluid.parts_recomputed();
  EXPECT_LT(reached, whole) << "some changes reached only part of the fluid";
  while (fluid.next_finish() != kNever) {
    now = fluid.next_finish();
    fluid.complete(now, [&](int p) { live.erase(p); });
    fluid.recompute(now);
  }
  EXPECT_TRUE(live.empty());
  EXPECT_NEAR(moved, added, added * 1e-12);
}

}  // namespace
}  // namespace weft::sim
