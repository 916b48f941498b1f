#include "weft/tensor/thread_pool.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "weft/util/env.h"
#include "weft/util/error.h"
#include "weft/util/spin_pause.h"

namespace weft {

namespace {

thread_local bool t_in_pool = false;

// How long a pool thread pauses the core for the next run (a worker) or for the workers'
// last chunks (the caller) before it sleeps on a condition variable, in a process that asked
// for it (set_pool_pause: weft serve and weft generate). Waking a sleeping thread takes tens of
// microseconds on a virtual machine, longer than the products of a decoding step (a 768 x
// 2,304 int8 layer reads 1.8 MB: about 45 us), so without a pause the second thread joined a
// product after the first had done it (bench/README.md, session 41). Training does not ask
// (yet): 80 steps of the GPT took 5.96 s with pauses against 6.47 s on the idle machine, but
// 10.01 s against 9.59 s beside a busy process (medians of interleaved runs), and a shared
// machine is where training's waits must give the core away (the issue "collectives that stay
// fast on a busy machine"). Adaptive, as comm's waits (comm/wait_policy.h): a wait that
// lasted longer than the most pause halves the next one (down to 1 us), so a pool idle
// between requests, or one whose threads a busy machine keeps off their cores, soon stops
// spinning; one that ended within it makes the pause cover twice that wait.
std::atomic<std::int64_t> g_most_pause_us{-1};  // set_pool_pause's; -1 until it is called (0)

std::chrono::microseconds most_pause() {
  static const std::int64_t from_env = env_int_in("WEFT_POOL_SPIN_US", 0, 1000000).value_or(-1);
  if (from_env >= 0) return std::chrono::microseconds(from_env);
  const std::int64_t set = g_most_pause_us.load(std::memory_order_relaxed);
  return std::chrono::microseconds(set < 0 ? 0 : set);
}

class Pause {
 public:
  // Pauses until done() or the pause runs out; whether done() came. After a false, the
  // caller sleeps and then calls woke().
  template <class Done>
  bool until(const Done& done) {
    start_ = std::chrono::steady_clock::now();
    if (most_pause().count() == 0) return done();
    budget_ = std::min<std::chrono::nanoseconds>(budget_, most_pause());
    for (int i = 0;; ++i) {
      if (done()) {
        woke();
        return true;
      }
      if ((i & 63) == 63 && std::chrono::steady_clock::now() - start_ > budget_) return false;
      spin_pause();
    }
  }
  // The wait that until() began has ended.
  void woke() {
    const auto waited = std::chrono::steady_clock::now() - start_;
    if (waited > most_pause())
      budget_ = std::max<std::chrono::nanoseconds>(std::chrono::microseconds(1), budget_ / 2);
    else
      budget_ = std::min<std::chrono::nanoseconds>(most_pause(), std::max<std::chrono::nanoseconds>(2 * budget_, 2 * waited));
  }

 private:
  std::chrono::nanoseconds budget_{std::chrono::seconds(1)};  // (capped by the most pause)
  std::chrono::steady_clock::time_point start_{};
};

// A fixed set of workers; run() hands every worker one chunk index at a time.
// A run is published without a lock (the chunk count, then the claim word with the run's
// generation) and taken by a pausing worker without one; the mutex and the condition
// variables serve only threads that sleep, announced in `sleepers_` and `caller_sleeping_`.
// (With the mutex held over the publication, a pausing worker that saw the new run blocked
// on it until the kernel woke it: on a 2-core VM a run of 8 chunks of 0.4-2.3 us cost
// 2.0-3.0 us beyond its work on 2 threads, against 1.5-1.9 us without; a decoding step of one
// stream makes about 60 runs.)
class ThreadPool {
 public:
  explicit ThreadPool(int threads) : threads_(threads), active_(threads) {
    most_pause();  // (WEFT_POOL_SPIN_US read now, not by a worker as the process exits)
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { work(i); });
  }
  ~ThreadPool() {
    stop_.store(true);
    {
      std::lock_guard<std::mutex> lock(mu_);
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  int size() const { return threads_; }
  int active() const { return active_.load(); }
  void set_active(int active) { active_.store(std::clamp(active, 1, threads_)); }

  void run(int chunks, const std::function<void(int)>& fn) {
    std::lock_guard<std::mutex> serial(run_mu_);
    const std::uint64_t generation = ++generation_ & 0xffffffffu;
    // A claim carries the generation, so a worker still finishing the previous run's drain
    // cannot take (and run twice, and count twice) a chunk of this one. Closed first, before
    // the chunk count changes: a worker that read the previous run's last claim and then
    // this run's larger count would otherwise still claim it (the test
    // BackToBackRunsOfChangingSizesRunEachChunkOnce caught one in 40,000 runs).
    next_.store((generation << 32) | kClosed);
    fn_.store(&fn);
    chunks_.store(chunks);
    remaining_.store(chunks);
    next_.store(generation << 32);  // (sequentially consistent: against sleepers_ below)
    if (sleepers_.load() > 0) {
      // A worker going to sleep checks the claim word under the mutex: taken here, the
      // notification cannot fall between its check and its wait.
      { std::lock_guard<std::mutex> lock(mu_); }
      cv_.notify_all();
    }
    t_in_pool = true;
    drain(generation);
    t_in_pool = false;
    // Wait for the chunks the workers took.
    if (!caller_pause_.until([&] { return remaining_.load(std::memory_order_acquire) == 0; })) {
      caller_sleeping_.store(true);
      {
        std::unique_lock<std::mutex> lock(mu_);
        done_cv_.wait(lock, [&] { return remaining_.load() == 0; });
      }
      caller_sleeping_.store(false);
      caller_pause_.woke();
    }
  }

 private:
  // Runs chunks of run `generation` until none is left (or another run has begun).
  void drain(std::uint64_t generation) {
    for (;;) {
      std::uint64_t claim = next_.load(std::memory_order_acquire);
      if (claim >> 32 != generation) break;
      const std::int64_t i = claim & 0xffffffffu;
      if (i >= chunks_.load()) break;
      if (!next_.compare_exchange_weak(claim, claim + 1, std::memory_order_acq_rel)) continue;
      (*fn_.load())(static_cast<int>(i));
      if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1 && caller_sleeping_.load()) {
        { std::lock_guard<std::mutex> lock(mu_); }
        done_cv_.notify_all();
      }
    }
  }

  // Worker `id` (1..threads-1) takes chunks only while it is among the active threads.
  void work(int id) {
    t_in_pool = true;
    std::uint64_t seen = 0;  // the generation of the last run this worker saw
    Pause pause;
    // A run newer than the last seen, open for claims (not closed for its publication).
    const auto published = [&] {
      const std::uint64_t word = next_.load();
      return stop_.load() || ((word >> 32) != seen && (word & 0xffffffffu) != kClosed);
    };
    for (;;) {
      if (!pause.until(published)) {
        sleepers_.fetch_add(1);
        {
          std::unique_lock<std::mutex> lock(mu_);
          cv_.wait(lock, published);
        }
        sleepers_.fetch_sub(1);
        pause.woke();
      }
      if (stop_.load()) return;
      const std::uint64_t word = next_.load(std::memory_order_acquire);
      if ((word & 0xffffffffu) == kClosed) continue;  // a newer run, being published
      seen = word >> 32;
      if (id < active_.load()) drain(seen);
    }
  }

  int threads_;
  std::atomic<int> active_;
  std::vector<std::thread> workers_;
  std::mutex run_mu_;
  Pause caller_pause_;          // under run_mu_
  std::uint64_t generation_ = 0;  // under run_mu_
  std::mutex mu_;               // for sleeping threads only
  std::condition_variable cv_;
  std::condition_variable done_cv_;
  std::atomic<int> sleepers_{0};
  std::atomic<bool> caller_sleeping_{false}, stop_{false};
  std::atomic<const std::function<void(int)>*> fn_{nullptr};
  std::atomic<int> chunks_{0};
  static constexpr std::uint64_t kClosed = 0xffffffffu;  // a chunk index no run reaches
  // The next chunk to claim: the run's generation (low 32 bits of it) above, the chunk below.
  std::atomic<std::uint64_t> next_{0};
  std::atomic<int> remaining_{0};
};

int default_threads() {
  if (auto t = env_positive_int("WEFT_NUM_THREADS")) return *t;
  long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

std::mutex g_pool_mu;
std::unique_ptr<ThreadPool> g_pool;

// A new pool. (OpenBLAS runs single-threaded, its workers stopped as it loads: products are
// split on this pool, linalg.h and blas.h.)
void make_pool(int threads) {
  g_pool.reset();
  g_pool = std::make_unique<ThreadPool>(threads);
}

ThreadPool& pool() {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (!g_pool) make_pool(default_threads());
  return *g_pool;
}

}  // namespace

void set_pool_pause(std::chrono::microseconds most) { g_most_pause_us.store(most.count()); }

void set_num_threads(int threads) {
  if (threads < 1) throw ConfigError("thread count must be at least 1, got " + std::to_string(threads));
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (!g_pool || g_pool->size() != threads) make_pool(threads);
}

int get_num_threads() { return pool().size(); }

void set_active_threads(int threads) {
  ThreadPool& p = pool();
  if (threads < 1 || threads > p.size())
    throw ConfigError("active threads must be between 1 and " + std::to_string(p.size()) + ", got " + std::to_string(threads));
  p.set_active(threads);
}

int get_active_threads() { return pool().active(); }

bool in_parallel_for() { return t_in_pool; }

void parallel_for(std::int64_t n, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<std::int64_t>(grain, 1);
  ThreadPool& p = pool();
  const int threads = p.active();
  // Up to 4 chunks per thread: a thread slowed by a busy core takes fewer of them.
  std::int64_t chunks = std::min<std::int64_t>(4 * static_cast<std::int64_t>(threads), (n + grain - 1) / grain);
  if (threads <= 1 || chunks <= 1 || t_in_pool) {
    fn(0, n);
    return;
  }
  std::int64_t per = (n + chunks - 1) / chunks;
  p.run(static_cast<int>(chunks), [&](int c) {
    std::int64_t b = c * per, e = std::min(n, b + per);
    if (b < e) fn(b, e);
  });
}

}  // namespace weft
