#include "weft/tensor/profile.h"

#include <atomic>
#include <chrono>

#include "weft/tensor/thread_pool.h"

namespace weft {

namespace {
std::atomic<bool> g_on{false};
std::array<std::atomic<std::int64_t>, kWorkKinds> g_ns{};
thread_local int t_depth = 0;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

const char* work_name(Work w) {
  switch (w) {
    case Work::Gemm: return "gemm";
    case Work::Conv: return "conv";
    case Work::Optimizer: return "optimizer";
  }
  return "?";
}

void set_profiling(bool on) { g_on.store(on, std::memory_order_relaxed); }
bool profiling() { return g_on.load(std::memory_order_relaxed); }

ProfileScope::ProfileScope(Work w) : work_(w) {
  // Work inside a parallel_for is inside the wall time of the scope that started it.
  if (t_depth++ == 0 && profiling() && !in_parallel_for()) start_ns_ = now_ns();
}

ProfileScope::~ProfileScope() {
  --t_depth;
  if (start_ns_ >= 0) g_ns[static_cast<int>(work_)].fetch_add(now_ns() - start_ns_, std::memory_order_relaxed);
}

std::array<double, kWorkKinds> profile_seconds() {
  std::array<double, kWorkKinds> s{};
  for (int i = 0; i < kWorkKinds; ++i) s[static_cast<std::size_t>(i)] = static_cast<double>(g_ns[static_cast<std::size_t>(i)].load()) * 1e-9;
  return s;
}

void profile_reset() {
  for (auto& v : g_ns) v.store(0);
}

}  // namespace weft
