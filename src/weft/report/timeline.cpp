#include "weft/report/timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <fstream>
#include <map>

#include "weft/util/error.h"
#include "weft/util/file.h"
#include "weft/util/json_integer.h"

namespace weft::report {

using nlohmann::json;

namespace {

struct Span {
  double start, end;  // microseconds
  int pid, tid;
  std::string kind;
};

// "forward 3" -> "forward", "recv activation 0 from stage 0" -> "recv activation".
std::string kind_of(const std::string& name) {
  std::size_t cut = name.find_first_of("0123456789");
  std::string kind = name.substr(0, cut);
  while (!kind.empty() && (kind.back() == ' ' || kind.back() == '#' || kind.back() == ':')) kind.pop_back();
  return kind.empty() ? name : kind;
}

}  // namespace

bool is_trace_file(const std::string& path) {
  if (!file_exists(path) || is_directory(path)) return false;
  std::ifstream in(path);
  char head[64] = {};
  in.read(head, sizeof head - 1);
  return std::string(head).find("traceEvents") != std::string::npos;
}

json timeline_section(const std::vector<std::string>& paths, std::size_t max_spans) {
  std::vector<Span> spans;
  std::map<int, std::string> process_names;
  std::map<std::pair<int, int>, std::string> thread_names;
  for (const std::string& path : paths) {
    json doc = json::parse(read_file(path), nullptr, false);
    if (doc.is_discarded() || !doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array())
      throw DataError(path + ": not a Chrome trace (weft train --timeline writes them)");
    for (const json& e : doc["traceEvents"]) {
      if (!e.is_object() || !e.contains("ph") || !e["ph"].is_string()) continue;
      auto id = [&](const char* key) {  // an integer field (never a float cast), or 0 when absent
        if (!e.contains(key)) return 0;
        const std::optional<std::int64_t> v = json_integer(e[key], INT_MIN, INT_MAX);
        if (!v) throw DataError(path + ": not as weft writes it (" + key + " is not a whole number)");
        return static_cast<int>(*v);
      };
      const int pid = id("pid"), tid = id("tid");
      const std::string ph = e["ph"].get<std::string>();
      const json args = e.value("args", json::object());
      if (ph == "M" && args.is_object() && args.contains("name") && args["name"].is_string()) {
        if (e.value("name", std::string()) == "process_name") process_names[pid] = args["name"].get<std::string>();
        if (e.value("name", std::string()) == "thread_name") thread_names[{pid, tid}] = args["name"].get<std::string>();
      }
      if (ph != "X" || !e.contains("ts") || !e["ts"].is_number() || !e.contains("dur") || !e["dur"].is_number()) continue;
      const double ts = e["ts"].get<double>(), dur = e["dur"].get<double>();
      if (!(dur >= 0)) continue;
      spans.push_back({ts, ts + dur, pid, tid, kind_of(e.value("name", std::string("?")))});
    }
  }
  if (spans.empty()) throw DataError(paths.front() + ": the trace holds no timed events");
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.start < b.start; });
  const double run_start = spans.front().start;
  double run_end = 0;
  for (const Span& s : spans) run_end = std::max(run_end, s.end);
  // The window drawn: the last `max_spans` spans.
  double from = run_start;
  if (spans.size() > max_spans) {
    from = spans[spans.size() - max_spans].start;
    spans.erase(std::remove_if(spans.begin(), spans.end(), [&](const Span& s) { return s.end < from; }), spans.end());
  }
  std::map<std::pair<int, int>, int> lane_of;
  for (const Span& s : spans) lane_of[{s.pid, s.tid}] = 0;
  json lanes = json::array();
  for (auto& [key, index] : lane_of) {
    index = static_cast<int>(lanes.size());
    const std::string process = process_names.count(key.first) ? process_names[key.first] : fmt::format("rank {}", key.first);
    const std::string thread = thread_names.count(key) ? thread_names[key] : fmt::format("row {}", key.second);
    lanes.push_back(process + " " + thread);
  }
  std::map<std::string, int> kind_index;
  json kinds = json::array();
  json drawn = json::array();
  std::map<std::pair<int, int>, double> busy;
  for (const Span& s : spans) {
    auto [it, added] = kind_index.emplace(s.kind, static_cast<int>(kinds.size()));
    if (added) kinds.push_back({{"name", s.kind}});
    const double start = std::max(s.start, from);
    drawn.push_back({lane_of[{s.pid, s.tid}], it->second, (start - from) / 1e3, (s.end - from) / 1e3});
    busy[{s.pid, s.tid}] += s.end - start;  // the rows' spans do not overlap
  }
  json notes = json::array();
  const double shown = std::max(run_end - from, 1e-9);
  notes.push_back(from > run_start
                      ? fmt::format("The last {:.1f} ms of the run's {:.1f} ms ({} spans drawn at most).", shown / 1e3,
                                    (run_end - run_start) / 1e3, max_spans)
                      : fmt::format("The whole run: {:.1f} ms.", shown / 1e3));
  std::string idle;
  for (const auto& [key, index] : lane_of) {
    if (key.second != 0) continue;
    idle += fmt::format("{}{} {:.0f}%", idle.empty() ? "" : ", ", lanes[index].get<std::string>(),
                        100 * std::max(0.0, 1 - busy[key] / shown));
  }
  if (!idle.empty())
    notes.push_back("Idle time of each rank's own work in this window (the pipeline bubble, waits, data): " + idle + ".");
  json chart = {{"id", "timeline"}, {"type", "lanes"}, {"title", "Timeline"},
                {"how", "one lane per rank for its own work and one for the communication beside it; gaps in a "
                        "compute lane are time that rank waited"},
                {"x", "ms"}, {"lanes", lanes}, {"kinds", kinds}, {"spans", drawn}};
  return {{"title", "Timeline"}, {"notes", notes}, {"charts", json::array({chart})}};
}

}  // namespace weft::report
