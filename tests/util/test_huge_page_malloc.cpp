// The environment weft restarts with for huge pages in malloc (util/huge_page_malloc.h).
#include <gtest/gtest.h>

#include "weft/util/huge_page_malloc.h"

using weft::tunables_with_huge_page_malloc;

TEST(HugePageMalloc, AddsTheTunableOnlyWhenTheKernelWaitsForAdvice) {
  EXPECT_EQ(tunables_with_huge_page_malloc(nullptr, "madvise"), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(tunables_with_huge_page_malloc("", "madvise"), "glibc.malloc.hugetlb=1");
  // The user's other tunables stay.
  EXPECT_EQ(tunables_with_huge_page_malloc("glibc.malloc.arena_max=2", "madvise"),
            "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1");
  // Set already (the restarted process, or the user's choice either way): nothing to add,
  // so the restart happens once.
  EXPECT_EQ(tunables_with_huge_page_malloc("glibc.malloc.hugetlb=1", "madvise"), "");
  EXPECT_EQ(tunables_with_huge_page_malloc("glibc.malloc.hugetlb=0", "madvise"), "");
  EXPECT_EQ(tunables_with_huge_page_malloc("a=1:glibc.malloc.hugetlb=0", "madvise"), "");
  // "always" gives huge pages without advice, "never" none; unreadable: leave it.
  EXPECT_EQ(tunables_with_huge_page_malloc(nullptr, "always"), "");
  EXPECT_EQ(tunables_with_huge_page_malloc(nullptr, "never"), "");
  EXPECT_EQ(tunables_with_huge_page_malloc(nullptr, ""), "");
}

TEST(HugePageMalloc, ReadsTheKernelsMode) {
  const std::string mode = weft::transparent_huge_page_mode();
  EXPECT_TRUE(mode == "always" || mode == "madvise" || mode == "never" || mode.empty()) << mode;
}
