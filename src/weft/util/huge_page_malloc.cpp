#include "weft/util/huge_page_malloc.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>

namespace weft {

std::string tunables_with_huge_page_malloc(const char* current, std::string_view thp_mode) {
  if (thp_mode != "madvise") return "";
  const std::string now = current == nullptr ? "" : current;
  if (now.find("glibc.malloc.hugetlb") != std::string::npos) return "";
  return now.empty() ? "glibc.malloc.hugetlb=1" : now + ":glibc.malloc.hugetlb=1";
}

std::string transparent_huge_page_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(in, line);
  const auto open = line.find('['), close = line.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return "";
  return line.substr(open + 1, close - open - 1);
}

void restart_with_huge_page_malloc(char** argv) {
  const std::string value = tunables_with_huge_page_malloc(std::getenv("GLIBC_TUNABLES"), transparent_huge_page_mode());
  if (value.empty()) return;
  // The program's own path, not /proc/self/exe: the process's name (ps, top, pgrep) comes
  // from the file executed.
  char path[4096];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0 || static_cast<std::size_t>(n) >= sizeof path - 1) return;
  path[n] = '\0';
  if (::setenv("GLIBC_TUNABLES", value.c_str(), 1) != 0) return;
  ::execv(path, argv);
  // (exec failed: no /proc, say; the process goes on with small pages, and its children
  // inherit the variable, harmless.)
}

}  // namespace weft
