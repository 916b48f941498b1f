#include "weft/train/timeline.h"

#include <nlohmann/json.hpp>

#include "weft/util/file.h"

namespace weft {

namespace {
double micros(std::chrono::nanoseconds d) { return static_cast<double>(d.count()) / 1e3; }
}  // namespace

Timeline::Timeline(int rank)
    : rank_(rank),
      wall_offset_us_(micros(std::chrono::system_clock::now().time_since_epoch()) - micros(Clock::now().time_since_epoch())) {}

void Timeline::add(const std::string& name, const std::string& category, Clock::time_point start,
                   Clock::time_point end, int row) {
  const double begin = micros(start.time_since_epoch()) + wall_offset_us_;
  events_.push_back({name, category, begin, micros(end - start), row});
}

void Timeline::write(const std::string& path) const {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank_},
                    {"args", {{"name", "rank " + std::to_string(rank_)}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", 0}, {"args", {{"name", "compute"}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", 1},
                    {"args", {{"name", "communication"}}}});
  for (const auto& e : events_) {
    events.push_back({{"name", e.name}, {"cat", e.category}, {"ph", "X"}, {"pid", rank_}, {"tid", e.row},
                      {"ts", e.start_us}, {"dur", e.duration_us}});
  }
  nlohmann::json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  auto slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) make_directories(path.substr(0, slash));
  write_file_atomic(path, doc.dump() + "\n");
}

std::string timeline_path(const std::string& file, int rank, int world) {
  if (world <= 1) return file;
  auto slash = file.find_last_of('/');
  auto dot = file.find_last_of('.');
  std::string suffix = "-rank" + std::to_string(rank);
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return file + suffix;
  return file.substr(0, dot) + suffix + file.substr(dot);
}

void check_timeline_output(const std::string& path, const std::string& flag) {
  check_replaceable_file(path, flag, "a timeline (Chrome trace)", is_chrome_trace_head);
}

}  // namespace weft
