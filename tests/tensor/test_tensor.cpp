#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

#include "weft/tensor/allocator.h"
#include "weft/tensor/ops.h"
#include "weft/tensor/rng.h"
#include "weft/tensor/shared_chunks.h"
#include "weft/tensor/stealing_ranges.h"
#include "weft/tensor/thread_pool.h"

using namespace weft;

TEST(Tensor, FactoriesAndShape) {
  Tensor z = Tensor::zeros({2, 3});
  EXPECT_EQ(z.numel(), 6);
  EXPECT_EQ(z.dim(), 2);
  EXPECT_TRUE(z.is_contiguous());
  EXPECT_EQ(z.strides(), (Shape{3, 1}));
  EXPECT_EQ(ops::sum(z).item(), 0.0);
  Tensor f = Tensor::full({4}, 2.5, DType::F64);
  EXPECT_EQ(f.dtype(), DType::F64);
  EXPECT_EQ(ops::sum(f).item(), 10.0);
  Tensor s = Tensor::scalar(3.0);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item(), 3.0);
}

TEST(Tensor, ViewsShareStorage) {
  Tensor a = Tensor::arange(12).view({3, 4});
  Tensor t = a.t();
  EXPECT_TRUE(t.shares_storage(a));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.shape(), (Shape{4, 3}));
  EXPECT_EQ(t.at({1, 2}), a.at({2, 1}));
  Tensor row = a.select(0, 1);
  EXPECT_EQ(row.to_vector(), (std::vector<double>{4, 5, 6, 7}));
  Tensor cols = a.slice(1, 1, 3);
  EXPECT_EQ(cols.to_vector(), (std::vector<double>{1, 2, 5, 6, 9, 10}));
  cols.fill_(-1);  // writes through the view
  EXPECT_EQ(a.at({0, 1}), -1);
  EXPECT_EQ(a.at({2, 3}), 11);
}

TEST(Tensor, ReshapeOfNonContiguousCopies) {
  Tensor a = Tensor::arange(6).view({2, 3});
  Tensor r = a.t().reshape({6});
  EXPECT_FALSE(r.shares_storage(a));
  EXPECT_EQ(r.to_vector(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(a.view({3, -1}).shape(), (Shape{3, 2}));
  EXPECT_THROW(a.view({4, 2}), InternalError);
  EXPECT_THROW(a.t().view({6}), InternalError);
}

TEST(Tensor, PermuteExpandUnsqueeze) {
  Tensor a = Tensor::arange(24).view({2, 3, 4});
  Tensor p = a.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.at({3, 1, 2}), a.at({1, 2, 3}));
  Tensor b = Tensor::arange(3).view({3, 1}).expand({3, 5});
  EXPECT_EQ(b.stride(1), 0);
  EXPECT_EQ(b.at({2, 4}), 2);
  EXPECT_EQ(Tensor::arange(3).unsqueeze(0).shape(), (Shape{1, 3}));
  EXPECT_EQ(Tensor::arange(3).unsqueeze(-1).shape(), (Shape{3, 1}));
  EXPECT_EQ(Tensor::zeros({1, 3}).squeeze(0).shape(), (Shape{3}));
  EXPECT_THROW(Tensor::zeros({2, 3}).expand({4, 3}), InternalError);
}

TEST(Tensor, BroadcastingArithmetic) {
  Tensor a = Tensor::arange(6).view({2, 3});
  Tensor b = Tensor::from_vector(std::vector<float>{10, 20, 30}, {3});
  Tensor c = ops::add(a, b);
  EXPECT_EQ(c.to_vector(), (std::vector<double>{10, 21, 32, 13, 24, 35}));
  Tensor col = Tensor::from_vector(std::vector<float>{1, 2}, {2, 1});
  EXPECT_EQ(ops::mul(a, col).to_vector(), (std::vector<double>{0, 1, 2, 6, 8, 10}));
  EXPECT_EQ(ops::sub(a.t(), Tensor::scalar(1)).to_vector(), (std::vector<double>{-1, 2, 0, 3, 1, 4}));
  EXPECT_EQ(broadcast_shapes({4, 1, 3}, {5, 1}), (Shape{4, 5, 3}));
  EXPECT_THROW(broadcast_shapes({2, 3}, {4}), InternalError);
  EXPECT_THROW(ops::add(a, Tensor::zeros({3}, DType::F64)), InternalError);
}

TEST(Tensor, Reductions) {
  Tensor a = Tensor::arange(24, DType::F64).view({2, 3, 4});
  EXPECT_EQ(ops::sum(a).item(), 276);
  Tensor s0 = ops::sum(a, {0}, false);
  EXPECT_EQ(s0.shape(), (Shape{3, 4}));
  EXPECT_EQ(s0.at({1, 2}), 6 + 18);
  Tensor s12 = ops::sum(a, {1, 2}, true);
  EXPECT_EQ(s12.shape(), (Shape{2, 1, 1}));
  EXPECT_EQ(s12.at({1, 0, 0}), 12 * 12 + 66);
  EXPECT_DOUBLE_EQ(ops::mean(a).item(), 11.5);
  Tensor m = ops::mean(a, {-1}, false);
  EXPECT_DOUBLE_EQ(m.at({0, 0}), 1.5);
  // sum_to_shape undoes broadcasting.
  Tensor g = Tensor::ones({4, 2, 3});
  EXPECT_EQ(ops::sum_to_shape(g, {2, 1}).to_vector(), (std::vector<double>{12, 12}));
  EXPECT_EQ(ops::sum_to_shape(g, {3}).to_vector(), (std::vector<double>{8, 8, 8}));
  EXPECT_EQ(ops::argmax_rows(Tensor::from_vector(std::vector<float>{1, 5, 2, 7, 0, 7}, {2, 3})),
            (std::vector<std::int64_t>{1, 0}));
}

TEST(Tensor, CopyConvertsDtypes) {
  Tensor a = Tensor::from_vector(std::vector<double>{1.5, -2.25}, {2});
  Tensor f = a.to(DType::F32);
  EXPECT_EQ(f.dtype(), DType::F32);
  EXPECT_EQ(f.to_vector(), (std::vector<double>{1.5, -2.25}));
  EXPECT_TRUE(ops::equal(f.to(DType::F64), a));
}

TEST(Rng, SeededAndRestorable) {
  Rng a(42), b(42), c(43);
  EXPECT_EQ(a.next_u64(), b.next_u64());
  EXPECT_NE(a.next_u64(), c.next_u64());
  a.normal();  // leaves a cached spare
  RngState st = a.state();
  double x = a.normal(), y = a.uniform();
  Rng d(0);
  d.set_state(st);
  EXPECT_EQ(d.normal(), x);
  EXPECT_EQ(d.uniform(), y);
}

TEST(Rng, NormalMoments) {
  Rng r(1);
  Tensor t = randn({100000}, r, 2.0, 3.0, DType::F64);
  double mean = ops::mean(t).item();
  double var = ops::mean(ops::square(ops::add(t, -mean))).item();
  EXPECT_NEAR(mean, 2.0, 0.05);
  EXPECT_NEAR(std::sqrt(var), 3.0, 0.05);
  std::vector<int> counts(5, 0);
  for (int i = 0; i < 50000; ++i) counts[r.below(5)]++;
  for (int c : counts) EXPECT_NEAR(c, 10000, 400);
}

// randn transforms its uniforms on the pool: its values are still rng.normal's one by one, bit
// for bit, for any thread count, length (odd, even, across chunks of 2^15 pairs), dtype and a
// generator that holds a spare normal or not, and it leaves the generator as they do.
TEST(Rng, RandnIsNormalOneByOneOnAnyThreadCount) {
  const int threads_before = get_num_threads();
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    for (const std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{2}, std::int64_t{7},
                                 std::int64_t{65536}, std::int64_t{70001}}) {
      for (const bool spare : {false, true}) {
        for (const DType dtype : {DType::F32, DType::F64}) {
          Rng a(11), b(11);
          if (spare) a.normal(), b.normal();
          const Tensor t = randn({n}, a, 0.5, 0.02, dtype);
          const Tensor f = t.to(DType::F64);
          for (std::int64_t i = 0; i < n; ++i) {
            const double want = b.normal(0.5, 0.02);
            const double expected = dtype == DType::F32 ? static_cast<double>(static_cast<float>(want)) : want;
            ASSERT_EQ(f.data<double>()[i], expected) << "element " << i << " of " << n << ", " << threads << " threads";
          }
          // The generator where one by one leaves it, a spare included.
          EXPECT_EQ(a.state().s, b.state().s);
          EXPECT_EQ(a.state().has_spare, b.state().has_spare);
          EXPECT_EQ(a.normal(), b.normal());
        }
      }
    }
  }
  set_num_threads(threads_before);
}

TEST(ThreadPool, CoversRangeOnceForAnyThreadCount) {
  for (int threads : {1, 2, 3, 4}) {
    set_num_threads(threads);
    EXPECT_EQ(get_num_threads(), threads);
    std::vector<std::atomic<int>> hits(10007);
    parallel_for(10007, 100, [&](std::int64_t b, std::int64_t e) {
      for (auto i = b; i < e; ++i) hits[i]++;
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
  EXPECT_THROW(set_num_threads(0), ConfigError);
  set_num_threads(2);
}

// Back-to-back runs whose chunk counts change: a worker still finishing one run's chunks
// must never take a chunk of the next (it would run twice, and the run could return while
// it still runs).
TEST(ThreadPool, BackToBackRunsOfChangingSizesRunEachChunkOnce) {
  set_num_threads(2);
  std::vector<std::atomic<int>> hits(64);
  std::atomic<int> running{0};
  for (int run = 0; run < 200000; ++run) {
    const std::int64_t n = run % 2 ? 8 : 2;
    for (std::int64_t i = 0; i < n; ++i) hits[i] = 0;
    parallel_for(n, 1, [&](std::int64_t b, std::int64_t e) {
      running++;
      for (auto i = b; i < e; ++i) hits[i]++;
      running--;
    });
    ASSERT_EQ(running.load(), 0) << "run " << run << " returned while a chunk ran";
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "run " << run << ", element " << i;
  }
}

// One thread taking for every lane in turn: each owner takes its own range front to back;
// a lane that ran out takes the back half of the lane with the most left and goes on in
// order there; every unit once.
TEST(StealingRanges, OwnersTakeTheirRangesInOrderThenStealBackHalves) {
  StealingRanges r(10, 3);  // lanes [0, 3), [3, 6), [6, 10)
  std::vector<std::int64_t> lane0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(r.next_own(0, i));
    lane0.push_back(r.next(0));
  }
  EXPECT_EQ(lane0, (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_FALSE(r.next_own(0, 3));  // (unit 3 is lane 1's)
  EXPECT_EQ(r.next(0), 8);         // lane 2 has the most left (4): lane 0 takes [8, 10)
  EXPECT_TRUE(r.next_own(0, 9));
  EXPECT_FALSE(r.next_own(2, 8));
  EXPECT_EQ(r.next(2), 6);  // lane 2 kept [6, 8)
  EXPECT_EQ(r.next(0), 9);
  EXPECT_EQ(r.next(0), 4);  // lane 1 has 3 left, lane 2 one: lane 0 takes [4, 6) of lane 1's
  EXPECT_EQ(r.next(1), 3);
  EXPECT_EQ(r.next(1), 5);  // lane 1 ran out; lanes 0 and 2 have one each: the first's
  EXPECT_EQ(r.next(0), 7);
  for (int lane : {0, 1, 2}) EXPECT_EQ(r.next(lane), -1);
  EXPECT_EQ(StealingRanges(0, 2).next(1), -1);
  EXPECT_THROW(StealingRanges(5, 0), std::exception);
}

// Threads taking at once, over and over: every unit exactly once; a lane whose owner comes
// after the others finished finds its units taken by them.
TEST(StealingRanges, ThreadsTakeEveryUnitOnceAndALateOwnerFindsItsUnitsTaken) {
  for (int round = 0; round < 200; ++round) {
    const std::int64_t n = 1000 + round;
    StealingRanges r(n, 4);
    std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
    auto take = [&](int lane) {
      for (std::int64_t u = r.next(lane); u >= 0; u = r.next(lane)) hits[static_cast<std::size_t>(u)]++;
    };
    std::vector<std::thread> threads;
    for (int lane = 0; lane < 3; ++lane) threads.emplace_back(take, lane);
    for (auto& t : threads) t.join();
    EXPECT_EQ(r.next(3), -1) << "round " << round;
    for (std::int64_t u = 0; u < n; ++u) ASSERT_EQ(hits[static_cast<std::size_t>(u)].load(), 1) << "unit " << u;
  }
}

// One thread alone does every chunk, in order, and returns with all done.
TEST(SharedChunks, AThreadAloneDoesEveryChunkInOrder) {
  SharedChunks work(10, 3);
  std::vector<std::pair<std::int64_t, std::int64_t>> chunks;
  work.take_part([&](std::int64_t b, std::int64_t e) { chunks.emplace_back(b, e); });
  EXPECT_EQ(chunks, (std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 3}, {3, 6}, {6, 9}, {9, 10}}));
  work.take_part([&](std::int64_t, std::int64_t) { ADD_FAILURE() << "a chunk done twice"; });  // a late thread: none left
  SharedChunks none(0, 4), zero_chunk(2, 0);  // (a chunk below 1 counts as 1)
  none.take_part([&](std::int64_t, std::int64_t) { ADD_FAILURE() << "a chunk of no work"; });
  chunks.clear();
  zero_chunk.take_part([&](std::int64_t b, std::int64_t e) { chunks.emplace_back(b, e); });
  EXPECT_EQ(chunks, (std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 1}, {1, 2}}));
}

// Threads coming at once: every item done exactly once, and no thread returns before every
// item (the others' too) is done.
TEST(SharedChunks, ThreadsDoEveryItemOnceAndReturnWhenAllAreDone) {
  for (int round = 0; round < 100; ++round) {
    const std::int64_t n = 50 + round;
    SharedChunks work(n, 1 + round % 7);
    std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
    std::atomic<int> early{0};
    auto take = [&] {
      work.take_part([&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)]++;
      });
      for (std::int64_t i = 0; i < n; ++i)
        if (hits[static_cast<std::size_t>(i)].load() == 0) early++;
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t) threads.emplace_back(take);
    for (auto& t : threads) t.join();
    EXPECT_EQ(early.load(), 0) << "round " << round;
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<std::size_t>(i)].load(), 1) << "item " << i;
  }
}

TEST(ThreadPool, ElementwiseResultsDoNotDependOnThreads) {
  Rng r(3);
  Tensor a = randn({300, 700}, r), b = randn({700}, r);
  set_num_threads(1);
  Tensor one = ops::sigmoid(ops::add(a, b));
  set_num_threads(2);
  Tensor two = ops::sigmoid(ops::add(a, b));
  EXPECT_TRUE(ops::equal(one, two));
}

TEST(Tensor, ShapesWhoseElementCountOverflowsAreRefused) {
  const std::int64_t big = std::int64_t{1} << 40;
  EXPECT_THROW(Tensor::empty({big, big}), weft::ConfigError);
  EXPECT_THROW(Tensor::empty({big, big, big}), weft::ConfigError);  // its strides overflowed first
  EXPECT_THROW(Tensor::empty({std::int64_t{1} << 62}), weft::ConfigError);  // bytes past 2^64
  EXPECT_EQ(weft::shape_numel({big, 2}), big * 2);
}

// At step boundaries the cache gives back what sat unused for a whole step, and keeps the
// blocks a step takes again.
TEST(Allocator, StepBoundariesGiveBackIdleBlocks) {
  allocator_release_cache();
  const std::size_t reused = 3 << 20, idle = 5 << 20;  // two sizes no other test holds
  free_bytes(allocate_bytes(idle), idle);                // set-up's, never taken again
  allocator_trim_idle();                                 // (it was in no list at the last boundary)
  EXPECT_EQ(allocator_cached_bytes(), idle);
  for (int step = 0; step < 3; ++step) {
    free_bytes(allocate_bytes(reused), reused);  // each step takes this size and gives it back
    allocator_trim_idle();
    EXPECT_EQ(allocator_cached_bytes(), reused) << "step " << step;  // the idle block went at the first
  }
  allocator_release_cache();
  EXPECT_EQ(allocator_cached_bytes(), 0u);
}

// Under a ceiling, the allocation that would take the live tensors and the cached blocks past
// it is refused (nothing taken, the rest kept), naming what was being done; without one the
// same allocation succeeds.
namespace {
// The error of allocating `floats` floats ("" when it is taken and given back).
std::string error_of_empty(std::int64_t floats) {
  try {
    Tensor t = Tensor::empty({floats}, DType::F32);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Allocator, ACeilingRefusesWhatWouldPassIt) {
  allocator_release_cache();
  std::vector<Tensor> held;
  {
    const AllocationCeiling ceiling(allocator_live_bytes() + (10 << 20), "building the test's model");
    for (int i = 0; i < 2; ++i) held.push_back(Tensor::empty({1 << 20}, DType::F32));  // 2 x 4 MiB
    free_bytes(allocate_bytes(1 << 20), 1 << 20);  // 1 MiB cached: still the process's
    const std::size_t live = allocator_live_bytes();
    std::string error;
    try {
      held.push_back(Tensor::empty({1 << 20}, DType::F32));
    } catch (const ConfigError& e) {
      error = e.what();
    }
    EXPECT_EQ(error.rfind("building the test's model: its tensors would pass the ", 0), 0u) << error;
    EXPECT_NE(error.find(" held, 4.00 MiB more asked)"), std::string::npos) << error;
    EXPECT_EQ(allocator_live_bytes(), live);  // the refused block is not counted
    EXPECT_EQ(held.size(), 2u);  // 2 x 4 MiB + 1 MiB cached under 10 MiB; a third 4 MiB passes it
  }
  {  // nested: the lower holds while both live, the outer one again after
    const AllocationCeiling outer(allocator_live_bytes() + (6 << 20), "the outer step");
    {
      const AllocationCeiling inner(allocator_live_bytes() + (64 << 20), "the inner step");
      EXPECT_NE(error_of_empty(2 << 20).find("the inner step: "), std::string::npos);
    }
    EXPECT_NE(error_of_empty(2 << 20).find("the outer step: "), std::string::npos);
  }
  {  // a block the cache holds serves its size under the ceiling (the process takes nothing more)
    free_bytes(allocate_bytes(1 << 20), 1 << 20);  // 1 MiB cached
    const AllocationCeiling ceiling(allocator_live_bytes() + allocator_cached_bytes(), "the cached step");
    void* again = allocate_bytes(1 << 20);
    EXPECT_EQ(allocator_cached_bytes(), 0u);
    free_bytes(again, 1 << 20);
    EXPECT_NE(error_of_empty(2 << 20).find("the cached step: "), std::string::npos);  // new memory is refused
  }
  held.push_back(Tensor::empty({1 << 20}, DType::F32));  // no ceiling: taken
  EXPECT_EQ(held.size(), 3u);
  allocator_release_cache();
}

// Large blocks start on a 2 MiB boundary (for transparent huge pages), and a freed block
// serves the next allocation of its size: the step-to-step reuse of a training loop.
TEST(Allocator, LargeBlocksAreHugePageAlignedAndReused) {
  const std::size_t large = kHugePageMinBytes + 12345;
  void* first = allocate_bytes(large);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(first) % kHugePageBytes, 0u);
  static_cast<char*>(first)[large - 1] = 1;  // the whole block is usable
  const std::size_t live = allocator_live_bytes();
  free_bytes(first, large);
  EXPECT_EQ(allocator_live_bytes(), live - (large + 63) / 64 * 64);
  void* again = allocate_bytes(large);
  EXPECT_EQ(again, first);
  free_bytes(again, large);
  void* small = allocate_bytes(100);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(small) % 64, 0u);
  free_bytes(small, 100);
  Tensor t = Tensor::empty({static_cast<std::int64_t>(kHugePageMinBytes / sizeof(float))}, DType::F32);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data<float>()) % kHugePageBytes, 0u);
}
