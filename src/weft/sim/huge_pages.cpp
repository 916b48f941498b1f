#include "weft/sim/huge_pages.h"

#include <sys/mman.h>

#include <cstdlib>

namespace weft::sim {

void* allocate_huge(std::size_t bytes) {
  const std::size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  if (rounded < bytes) throw std::bad_alloc();
  void* p = nullptr;
  if (::posix_memalign(&p, kHugePage, rounded) != 0) throw std::bad_alloc();
  ::madvise(p, rounded, MADV_HUGEPAGE);  // advice: without it the pages are small
  return p;
}

void release_huge(void* p) noexcept { std::free(p); }

}  // namespace weft::sim
