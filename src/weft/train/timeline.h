// A timeline of one rank's training in the Chrome trace event format (open it in Perfetto
// or chrome://tracing): complete events ("ph": "X") with microsecond start and duration.
// One process per rank (pid = rank); rows (tid): 0 the step's own work (data, forward,
// backward per micro-batch, waits, the optimizer), 1 communication beside it (buckets,
// tensor-parallel collectives, pipeline sends and receives).
//
// Times are microseconds of the wall clock (the monotonic clock shifted once to it), so the
// files of every rank of a job share one clock and `weft timeline merge` (report/timeline.h)
// puts them side by side.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace weft {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Timeline(int rank);
  void add(const std::string& name, const std::string& category, Clock::time_point start, Clock::time_point end,
           int row = 0);
  // Writes the JSON file atomically.
  void write(const std::string& path) const;

 private:
  struct Event {
    std::string name, category;
    double start_us, duration_us;
    int row;
  };
  int rank_;
  double wall_offset_us_;  // wall clock minus monotonic clock
  std::vector<Event> events_;
};

// The file for `rank` when the job has `world` ranks: FILE itself for one rank, else
// FILE with "-rank<r>" before its extension (timeline.json -> timeline-rank1.json).
std::string timeline_path(const std::string& file, int rank, int world);

// An output that replaces only a Chrome trace (util/file.h's check_replaceable_file and
// is_chrome_trace_head). `flag` names the option in the error.
void check_timeline_output(const std::string& path, const std::string& flag);

}  // namespace weft
