// Memory in huge pages for the simulator's large arrays.
//
// A packet-level run of a large fabric touches its ports, queue pairs, packets and routes
// at random: with 4 KiB pages nearly every cache miss is also a TLB miss (the 8,192-host
// fat tree holds about 200 MiB). HugePageAllocator gives a std::vector (or any container)
// storage of 2 MiB or more aligned to 2 MiB and advised for transparent huge pages
// (madvise MADV_HUGEPAGE, which works where the system's setting is `madvise` or
// `always`); smaller requests are plain `operator new`. Advice only: where the kernel
// gives no huge pages the memory is the same, only slower. Contents are never touched.
#pragma once

#include <cstddef>
#include <new>

namespace weft::sim {

// Storage of `bytes` (at least kHugePage of them) on 2 MiB boundaries, advised for huge
// pages; release with release_huge. Throws std::bad_alloc.
void* allocate_huge(std::size_t bytes);
void release_huge(void* p) noexcept;
inline constexpr std::size_t kHugePage = std::size_t{2} << 20;

template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    if (n > std::size_t(-1) / sizeof(T)) throw std::bad_array_new_length();
    const std::size_t bytes = n * sizeof(T);
    if (bytes >= kHugePage) return static_cast<T*>(allocate_huge(bytes));
    return static_cast<T*>(::operator new(bytes, std::align_val_t{alignof(T)}));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n * sizeof(T) >= kHugePage) release_huge(p);
    else ::operator delete(p, std::align_val_t{alignof(T)});
  }
  template <class U>
  bool operator==(const HugePageAllocator<U>&) const noexcept { return true; }
};

}  // namespace weft::sim
