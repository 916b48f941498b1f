// Memory for tensor storage: 64-byte aligned blocks, with freed large blocks kept in a
// per-size cache. A training step allocates the same sizes every step; reusing them
// avoids page faults from fresh mmap'd memory, which would otherwise dominate small steps.
#pragma once

#include <cstddef>

namespace weft {

void* allocate_bytes(std::size_t bytes);
void free_bytes(void* p, std::size_t bytes);
// Bytes currently held in the cache (for tests and memory reports).
std::size_t allocator_cached_bytes();
// Gives the cached blocks back to the system (after a large part of the memory moved out
// for good: offloaded parameters or optimizer state).
void allocator_release_cache();
// Bytes currently allocated to live tensors, and the peak since the last reset.
std::size_t allocator_live_bytes();
std::size_t allocator_peak_bytes();
void allocator_reset_peak();

}  // namespace weft
