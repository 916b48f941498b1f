// A timeline of one rank's training in the Chrome trace event format (open it in Perfetto
// or chrome://tracing): complete events ("ph": "X") with microsecond start and duration.
// Rows (tid): 0 compute and data, 1 communication.
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
  std::size_t size() const { return events_.size(); }

 private:
  struct Event {
    std::string name, category;
    double start_us, duration_us;
    int row;
  };
  int rank_;
  Clock::time_point origin_;
  std::vector<Event> events_;
};

// The file for `rank` when the job has `world` ranks: FILE itself for one rank, else
// FILE with "-rank<r>" before its extension (timeline.json -> timeline-rank1.json).
std::string timeline_path(const std::string& file, int rank, int world);

}  // namespace weft
