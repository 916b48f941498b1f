// The thread pool for weft's kernels and its matrix products, and the single thread knob.
//
// set_num_threads(T) sizes this pool (OpenBLAS runs single-threaded: products are split on
// this pool, linalg.h); the default comes from WEFT_NUM_THREADS, else the number of cores.
// set_active_threads(A <= T) makes the kernels use only A of them (a governor lowers it
// when cores are busy: thread_governor.h).
// parallel_for splits a range into a fixed partition of up to 4 chunks per thread, taken
// by the threads as they come free: a thread slowed by a busy core takes fewer of them.
// Every kernel computes each output within one chunk, so results do not depend on the
// partition, the scheduling or the thread count.
// A process may ask the pool's threads to pause their cores a moment between runs before they
// sleep (set_pool_pause: serving's decoding steps; WEFT_POOL_SPIN_US overrides it either way;
// adaptive: thread_pool.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

#include "weft/util/dispatch.h"

namespace weft {

void set_num_threads(int threads);
// The most a pool thread pauses for the next run, or for the workers' last chunks, before it
// sleeps (0, the default: at once). WEFT_POOL_SPIN_US, when set, wins.
void set_pool_pause(std::chrono::microseconds most);
int get_num_threads();
// 1 <= threads <= get_num_threads(). Call it between steps, from the thread that runs the
// kernels.
void set_active_threads(int threads);
int get_active_threads();

// Calls fn(begin, end) over [0, n) in chunks of at least `grain` elements. Runs inline
// when the range is small, the pool has one thread, or it is called from a pool thread.
void parallel_for(std::int64_t n, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& fn);

// parallel_for whose chunks run at the level of weft's dispatched loops (util/dispatch.h):
// body(begin, end) is compiled for each level. For loops over elements.
template <class Body>
void parallel_loop(std::int64_t n, std::int64_t grain, const Body& body) {
  parallel_for(n, grain,
               [&body](std::int64_t begin, std::int64_t end) { dispatched(body, begin, end); });
}

// True on the pool's threads, and on the calling thread while it runs chunks of a
// parallel_for.
bool in_parallel_for();

}  // namespace weft
