// Memory for tensor storage: 64-byte aligned blocks, with freed large blocks kept in a
// per-size cache. A training step allocates the same sizes every step; reusing them
// avoids page faults from fresh mmap'd memory, which would otherwise dominate small steps.
// Blocks of kHugePageMinBytes and more start on a 2 MiB boundary, span whole 2 MiB pages and
// are advised for transparent huge pages (madvise; the kernel's "madvise" mode honours it):
// a dataset of 188 MB read in random rows, or a step's large activations, then costs one
// TLB entry per 2 MiB instead of per 4 KiB (the MLP's batch assembly fell from 0.39 to
// 0.05 ms a step).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace weft {

inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;
inline constexpr std::size_t kHugePageMinBytes = std::size_t{4} << 20;

void* allocate_bytes(std::size_t bytes);
void free_bytes(void* p, std::size_t bytes);
// Bytes currently held in the cache (for tests and memory reports).
std::size_t allocator_cached_bytes();
// Gives the cached blocks back to the system (after a large part of the memory moved out
// for good: offloaded parameters, optimizer state, ZeRO's sharded parameters).
void allocator_release_cache();
// At a step boundary: gives back the cached blocks that sat unused since the previous one
// (a block of a size the steps take again stays; one freed by set-up, or by a step whose
// sizes changed, goes after a whole step unused). Returns the bytes given back. Without it
// the cache kept up to 2 GiB of blocks no step would take, in the process's memory.
std::size_t allocator_trim_idle();
// Bytes currently allocated to live tensors (and held as CountedBytes, below), and the peak
// since the last reset.
std::size_t allocator_live_bytes();
std::size_t allocator_peak_bytes();
void allocator_reset_peak();

// While alive, a ceiling on the bytes of live tensors: an allocation that would take them past
// `bytes` throws ConfigError ("WHAT: ...") before anything is taken, so that a model of a size
// typed by hand is refused rather than pushing the machine into swap or the out-of-memory
// killer. Other threads' allocations count too. Nested, the lower ceiling holds, and the
// outer one again once the inner one is gone.
class AllocationCeiling {
 public:
  AllocationCeiling(std::size_t bytes, std::string what);
  ~AllocationCeiling();
  AllocationCeiling(const AllocationCeiling&) = delete;
  AllocationCeiling& operator=(const AllocationCeiling&) = delete;

 private:
  std::size_t outer_bytes_;
  std::string outer_what_;
};

// Bytes the process holds outside the allocator (a file read whole before its values become a
// tensor), counted as live tensors' while the object lives: taking them throws a ceiling's
// ConfigError when they would pass it, before anything is read.
class CountedBytes {
 public:
  CountedBytes() = default;
  explicit CountedBytes(std::size_t bytes);
  CountedBytes(CountedBytes&& other) noexcept;
  CountedBytes& operator=(CountedBytes&& other) noexcept;
  ~CountedBytes();

 private:
  std::size_t bytes_ = 0;
};

// The bytes of the file at `path`, counted (none where its size cannot be read): what it will
// hold once read whole, taken before it is.
CountedBytes counted_file_bytes(const std::string& path);

// A ceiling at what the process holds now plus nine tenths of the memory the machine has
// available (util/machine.h; the rest for the process's other memory), shared by `sharers`
// processes doing the same at once (a node's ranks); none where that cannot be read.
std::unique_ptr<AllocationCeiling> ceiling_at_available_memory(std::string what, int sharers = 1);

}  // namespace weft
