// Facts about this machine that change while weft runs.
//
// OtherCpuLoad: how busy other processes keep this machine's cores. Between two calls, the
// processor time every process used (/proc/stat) less this process's own (getrusage), as a
// share of the time the cores had (wall time x cores online). /proc/stat counts in clock ticks
// (10 ms), so a short interval reads coarsely; callers compare against a generous bound.
// Where /proc/stat cannot be read, the share is 0.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace weft {

class OtherCpuLoad {
 public:
  OtherCpuLoad();
  // The share (0..1) of the cores' time other processes used since the last call (or
  // construction).
  double sample();

 private:
  double machine_busy_ = 0, own_ = 0;  // seconds
  std::chrono::steady_clock::time_point at_;
  int cores_;
};

// The memory the machine can give a new allocation without swapping (MemAvailable of
// /proc/meminfo), or nothing where that cannot be read.
std::optional<std::int64_t> available_memory_bytes();
// One of `sharers` processes' share of nine tenths of it (the rest for what the processes
// hold outside their data: code, stacks, buffers), in bytes; 0 where it cannot be read.
std::size_t memory_share(int sharers);

// How many threads of the whole machine are running or ready to run at this instant (the
// fourth field of /proc/loadavg, the reader included), or nothing where that cannot be read.
std::optional<int> runnable_threads();

// The most memory this process has held resident so far (its peak RSS, getrusage).
std::int64_t peak_resident_bytes();

}  // namespace weft
