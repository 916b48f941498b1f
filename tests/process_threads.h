// The number of threads of this process (from /proc), for tests that check that a server
// starts no thread per connection.
#pragma once

#include <fstream>
#include <string>

namespace weft::testing {

inline int threads_of_this_process() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

}  // namespace weft::testing
