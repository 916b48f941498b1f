// The thread pool for weft's own (non-BLAS) kernels, and the single thread knob.
//
// set_num_threads(T) sizes this pool and OpenBLAS together; the default comes from
// WEFT_NUM_THREADS, else the number of cores. parallel_for splits a range into at most
// T contiguous chunks with a fixed partition, so results do not depend on scheduling.
#pragma once

#include <cstdint>
#include <functional>

namespace weft {

void set_num_threads(int threads);
int get_num_threads();

// Calls fn(begin, end) over [0, n) in chunks of at least `grain` elements. Runs inline
// when the range is small, the pool has one thread, or it is called from a pool thread.
void parallel_for(std::int64_t n, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& fn);

}  // namespace weft
