// Work [0, n) done once, shared by whichever threads come: each claims chunks of `chunk`
// items in order until none is left, then waits until the chunks the others claimed are
// done. A thread that comes alone, or before the others start, does them all, so none waits
// on a thread that has not started: a pool that runs a job's parts one after another on one
// thread cannot deadlock on it. The threads that come share the work as they are free (one
// held off its core leaves the rest to the others); each item is done exactly once, by one
// of them. Lock-free: two counters. The int8 products quantize their activations' rows so,
// in the same hand-over to the pool as the products (serve/quantize.cpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>

#include "weft/util/spin_pause.h"

namespace weft {

class SharedChunks {
 public:
  SharedChunks(std::int64_t n, std::int64_t chunk) : n_(n), chunk_(std::max<std::int64_t>(chunk, 1)) {}

  // body(begin, end) for each chunk this thread claims; returns once all n items are done.
  template <class Body>
  void take_part(const Body& body) {
    for (std::int64_t b = next_.fetch_add(chunk_); b < n_; b = next_.fetch_add(chunk_)) {
      const std::int64_t e = std::min(n_, b + chunk_);
      body(b, e);
      done_.fetch_add(e - b, std::memory_order_release);
    }
    for (int spins = 0; done_.load(std::memory_order_acquire) < n_; ++spins) {
      if (spins < 4096) {
        spin_pause();
      } else {
        std::this_thread::yield();  // (a claimer held off its core)
      }
    }
  }

 private:
  const std::int64_t n_, chunk_;
  std::atomic<std::int64_t> next_{0}, done_{0};
};

}  // namespace weft
