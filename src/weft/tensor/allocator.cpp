#include "weft/tensor/allocator.h"

#include <malloc.h>
#include <sys/mman.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "weft/util/error.h"
#include "weft/util/machine.h"
#include "weft/util/units.h"

namespace weft {

namespace {

constexpr std::size_t kAlign = 64;
constexpr std::size_t kCacheMinBytes = 16 * 1024;
constexpr std::size_t kCacheMaxTotal = std::size_t{2} << 30;  // never cache more than 2 GiB
constexpr std::size_t kTrimHeapBytes = std::size_t{64} << 20;   // trims that free this much trim the heap too

struct Cache {
  std::mutex mu;
  std::unordered_map<std::size_t, std::vector<void*>> free_blocks;
  // Per size, the fewest blocks the free list held since the last step boundary: that many
  // sat unused for the whole interval (allocator_trim_idle).
  std::unordered_map<std::size_t, std::size_t> low_water;
  std::atomic<std::size_t> cached{0};  // (changed under mu; read without it by the ceiling's check)
  ~Cache() {
    for (auto& [size, blocks] : free_blocks)
      for (void* p : blocks) std::free(p);
  }
};

Cache& cache() {
  static Cache* c = new Cache();  // intentionally leaked: tensors may outlive static destructors
  return *c;
}

std::atomic<std::size_t> g_live{0};
std::atomic<std::size_t> g_peak{0};

std::atomic<std::size_t> g_ceiling{0};  // 0: none (AllocationCeiling)
std::string g_ceiling_what;

std::size_t round_up(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

Cache& cache();

// `bytes` more live; `grows`: taken from the system rather than the cache (the ceiling checked).
void note_alloc(std::size_t bytes, bool grows) {
  std::size_t now = g_live.fetch_add(bytes) + bytes;
  if (const std::size_t ceiling = g_ceiling.load(); grows && ceiling > 0) {
    const std::size_t cached = cache().cached.load();  // freed blocks the process still holds count too
    if (now + cached > ceiling) {
      g_live.fetch_sub(bytes);
      throw ConfigError(fmt::format("{}: its tensors would pass the {:.1f} GiB of memory available to it ({} held, {} "
                                    "more asked)",
                                    g_ceiling_what, static_cast<double>(ceiling) / (1 << 30),
                                    human_bytes(static_cast<std::int64_t>(now + cached - bytes)),
                                    human_bytes(static_cast<std::int64_t>(bytes))));
    }
  }
  std::size_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}

}  // namespace

void* allocate_bytes(std::size_t bytes) {
  std::size_t size = round_up(bytes == 0 ? kAlign : bytes);
  if (size >= kCacheMinBytes) {
    void* p = nullptr;
    {
      Cache& c = cache();
      std::lock_guard<std::mutex> lock(c.mu);
      auto it = c.free_blocks.find(size);
      if (it != c.free_blocks.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        c.cached -= size;
        std::size_t& low = c.low_water[size];
        low = std::min(low, it->second.size());
      }
    }
    if (p != nullptr) {  // memory the process holds already: no ceiling to check
      note_alloc(size, /*grows=*/false);
      return p;
    }
  }
  note_alloc(size, /*grows=*/true);
  if (size >= kHugePageMinBytes) {  // whole huge pages (at most a third more than asked)
    const std::size_t pages = (size + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    void* p = std::aligned_alloc(kHugePageBytes, pages);
    if (p == nullptr) throw std::bad_alloc();
    ::madvise(p, pages, MADV_HUGEPAGE);  // advice only: without THP the pages stay small
    return p;
  }
  void* p = std::aligned_alloc(kAlign, size);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void free_bytes(void* p, std::size_t bytes) {
  if (p == nullptr) return;
  std::size_t size = round_up(bytes == 0 ? kAlign : bytes);
  g_live.fetch_sub(size);
  if (size >= kCacheMinBytes) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.cached + size <= kCacheMaxTotal) {
      c.free_blocks[size].push_back(p);
      c.cached += size;
      return;
    }
  }
  std::free(p);
}

std::size_t allocator_cached_bytes() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.cached;
}
void allocator_release_cache() {
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    for (auto& [size, blocks] : c.free_blocks)
      for (void* p : blocks) std::free(p);
    c.free_blocks.clear();
    c.low_water.clear();
    c.cached = 0;
  }
  ::malloc_trim(0);  // (memory freed inside the heap goes back too)
}

std::size_t allocator_trim_idle() {
  Cache& c = cache();
  std::size_t freed = 0;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    for (auto& [size, blocks] : c.free_blocks) {
      std::size_t& low = c.low_water[size];
      for (std::size_t i = 0; i < std::min(low, blocks.size()); ++i) {
        std::free(blocks.back());
        blocks.pop_back();
        freed += size;
      }
      low = blocks.size();
    }
    c.cached -= freed;
  }
  if (freed >= kTrimHeapBytes) ::malloc_trim(0);
  return freed;
}

std::size_t allocator_live_bytes() { return g_live.load(); }
std::size_t allocator_peak_bytes() { return g_peak.load(); }
void allocator_reset_peak() { g_peak.store(g_live.load()); }

AllocationCeiling::AllocationCeiling(std::size_t bytes, std::string what)
    : outer_bytes_(g_ceiling.load()), outer_what_(g_ceiling_what) {
  g_ceiling.store(0);  // (the text changes under no ceiling)
  g_ceiling_what = std::move(what);
  const std::size_t ceiling = std::max<std::size_t>(bytes, 1);
  g_ceiling.store(outer_bytes_ > 0 ? std::min(ceiling, outer_bytes_) : ceiling);
}
AllocationCeiling::~AllocationCeiling() {
  g_ceiling.store(0);
  g_ceiling_what = std::move(outer_what_);
  g_ceiling.store(outer_bytes_);
}

CountedBytes::CountedBytes(std::size_t bytes) {
  note_alloc(bytes, /*grows=*/true);
  bytes_ = bytes;
}
CountedBytes::CountedBytes(CountedBytes&& other) noexcept : bytes_(std::exchange(other.bytes_, 0)) {}
CountedBytes& CountedBytes::operator=(CountedBytes&& other) noexcept {
  if (this != &other) {
    g_live.fetch_sub(bytes_);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}
CountedBytes::~CountedBytes() { g_live.fetch_sub(bytes_); }

CountedBytes counted_file_bytes(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  return ec ? CountedBytes() : CountedBytes(static_cast<std::size_t>(size));
}

std::unique_ptr<AllocationCeiling> ceiling_at_available_memory(std::string what, int sharers) {
  const std::size_t share = memory_share(sharers);
  if (share == 0) return nullptr;
  return std::make_unique<AllocationCeiling>(allocator_live_bytes() + allocator_cached_bytes() + share, std::move(what));
}

}  // namespace weft
