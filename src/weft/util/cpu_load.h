// How busy other processes keep this machine's cores: between two calls, the processor
// time every process used (/proc/stat) less this process's own (getrusage), as a share of
// the time the cores had (wall time x cores online). /proc/stat counts in clock ticks
// (10 ms), so a short interval reads coarsely; callers compare against a generous bound.
// Where /proc/stat cannot be read, the share is 0.
#pragma once

#include <chrono>

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

}  // namespace weft
