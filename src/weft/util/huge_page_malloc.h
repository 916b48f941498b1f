// Transparent huge pages for malloc's large blocks (a corpus's tokens in a std::vector, a
// file read into a std::string, the libraries' buffers): glibc advises them to the kernel
// only under its tunable glibc.malloc.hugetlb=1, which it reads from the environment before
// main, so weft restarts itself once with it set. The first touch of a 4 KiB page cost 13-17
// us on the virtual machines weft is developed on (0.4-7.5 us per 4 KiB in a 2 MiB page): a
// GPT of 12.6M parameters that checkpoints and resumes took 1.79x the processor time without
// (bench/huge_page_malloc); a 2-layer GPT's step gains what the restart costs (tensor storage
// has its own advice: tensor/allocator.h).
#pragma once

#include <string>
#include <string_view>

namespace weft {

// The GLIBC_TUNABLES value that adds glibc.malloc.hugetlb=1 to `current` (null: unset), or
// "" when there is nothing to add: `current` already names glibc.malloc.hugetlb (the user's
// choice, =0 to keep small pages, or this process restarted with it), or the kernel's mode
// (the bracketed word of /sys/kernel/mm/transparent_hugepage/enabled) is not "madvise":
// "always" gives huge pages without advice, "never" none.
std::string tunables_with_huge_page_malloc(const char* current, std::string_view thp_mode);

// The bracketed word of the kernel's transparent_hugepage/enabled ("" if unreadable).
std::string transparent_huge_page_mode();

// First thing in main: re-executes the program (the file /proc/self/exe names, with the same
// arguments and environment but for GLIBC_TUNABLES) when tunables_with_huge_page_malloc has a value; goes
// on as it is when the exec fails. The restart costs a program start (about 20 ms).
void restart_with_huge_page_malloc(char** argv);

}  // namespace weft
