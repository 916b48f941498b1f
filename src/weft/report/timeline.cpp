#include "weft/report/timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
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
  return file_exists(path) && !is_directory(path) && is_chrome_trace_head(read_file_head(path));
}

std::vector<json> read_traces(const std::vector<std::string>& paths) {
  std::vector<json> traces;
  std::map<std::int64_t, std::size_t> owner;  // pid -> the file whose events it is
  for (std::size_t file = 0; file < paths.size(); ++file) {
    const std::string& path = paths[file];
    json doc = json::parse(read_file(path), nullptr, false);
    if (doc.is_discarded() || !doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array())
      throw DataError(path + ": not a Chrome trace (a JSON object with a traceEvents array; weft train --timeline writes them)");
    json& events = doc["traceEvents"];
    for (std::size_t i = 0; i < events.size(); ++i) {
      const json& e = events[i];
      const auto bad = [&](const std::string& why) {
        return DataError(fmt::format("{}: event {} of traceEvents {}", path, i, why));
      };
      if (!e.is_object()) throw bad("is not an object");
      if (!e.contains("ph") || !e["ph"].is_string() || e["ph"].get_ref<const std::string&>().empty())
        throw bad("has no phase (\"ph\", a string)");
      if (e.contains("name") && !e["name"].is_string()) throw bad("has a name that is not a string");
      for (const char* key : {"pid", "tid"})
        if (e.contains(key) && !json_integer(e[key], INT_MIN, INT_MAX)) throw bad(fmt::format("has a {} that is not a whole number", key));
      const bool complete = e["ph"] == "X";
      for (const char* key : {"ts", "dur"}) {
        if (!e.contains(key)) {
          if (complete) throw bad(fmt::format("is a complete event (\"X\") without \"{}\"", key));
          continue;
        }
        if (!e[key].is_number() || !std::isfinite(e[key].get<double>()) || (key[0] == 'd' && e[key].get<double>() < 0))
          throw bad(fmt::format("has a \"{}\" that is not a finite number{}", key, key[0] == 'd' ? " of zero or more" : ""));
      }
      const std::int64_t pid = e.contains("pid") ? *json_integer(e["pid"]) : 0;
      const auto [it, added] = owner.emplace(pid, file);
      if (!added && it->second != file)
        throw DataError(paths[it->second] == path
                            ? path + " is given twice"
                            : fmt::format("{} and {} both hold events of process {} (rank {}): give each rank's timeline "
                                          "once, from one run",
                                          paths[it->second], path, pid, pid));
    }
    traces.push_back(std::move(events));
  }
  return traces;
}

void merge_traces(const std::vector<std::string>& inputs, const std::string& output) {
  if (inputs.empty()) throw ConfigError("weft timeline merge: no input files");
  check_replaceable_file(output, "--out", "a timeline (Chrome trace)", is_chrome_trace_head);
  json events = json::array();
  for (json& trace : read_traces(inputs))
    for (json& e : trace) events.push_back(std::move(e));
  const json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  write_file_atomic(output, doc.dump() + "\n");
}

json timeline_section(const std::vector<std::string>& paths, std::size_t max_spans) {
  std::vector<Span> spans;
  std::map<int, std::string> process_names;
  std::map<std::pair<int, int>, std::string> thread_names;
  for (const json& events : read_traces(paths)) {
    for (const json& e : events) {
      const int pid = static_cast<int>(e.value("pid", 0)), tid = static_cast<int>(e.value("tid", 0));
      const std::string ph = e["ph"].get<std::string>();
      const json args = e.value("args", json::object());
      if (ph == "M" && args.is_object() && args.contains("name") && args["name"].is_string()) {
        if (e.value("name", std::string()) == "process_name") process_names[pid] = args["name"].get<std::string>();
        if (e.value("name", std::string()) == "thread_name") thread_names[{pid, tid}] = args["name"].get<std::string>();
      }
      if (ph != "X") continue;
      const double ts = e["ts"].get<double>(), dur = e["dur"].get<double>();
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
