#include "weft/report/simulation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <set>

#include "weft/report/csv.h"
#include "weft/report/page.h"
#include "weft/report/series.h"
#include "weft/util/error.h"
#include "weft/util/file.h"

namespace weft::report {

using nlohmann::json;

namespace {

constexpr std::size_t kQueues = 8;      // the busiest queues drawn
constexpr std::size_t kPauseLanes = 64;  // ports drawn in the PFC lanes (the first to pause)

const std::string& file(const SimFiles& files, const std::string& name) {
  auto it = files.find(name);
  if (it == files.end()) throw DataError("the simulation's outputs have no " + name);
  return it->second;
}

// Queue occupancy: the busiest queues (by their largest sample), zero where no sample was
// taken (queues.csv lists non-empty queues only).
json queue_chart(const CsvTable& q, double interval, std::size_t max_points) {
  const std::size_t c_time = q.column("time_us"), c_port = q.column("port"), c_queue = q.column("queue"),
                    c_bytes = q.column("bytes");
  std::map<std::string, std::vector<std::pair<double, double>>> by_queue;
  for (std::size_t r = 0; r < q.rows(); ++r)
    by_queue[q.text(r, c_port) + " q" + q.text(r, c_queue)].emplace_back(q.number(r, c_time), q.number(r, c_bytes));
  std::vector<std::pair<double, std::string>> peaks;
  for (const auto& [name, samples] : by_queue) {
    double peak = 0;
    for (const auto& s : samples) peak = std::max(peak, s.second);
    peaks.emplace_back(peak, name);
  }
  std::sort(peaks.begin(), peaks.end(), [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  json chart = {{"id", "queues"}, {"type", "line"}, {"title", "Queue occupancy of the busiest queues"},
                {"how", fmt::format("bytes queued at each sample ({} us apart); a queue absent from a sample was empty",
                                    interval)},
                {"x", "µs"}, {"y", "KB"}, {"series", json::array()}, {"legend", true}};
  for (std::size_t i = 0; i < peaks.size() && i < kQueues; ++i) {
    std::vector<double> x, y;
    double last = -1;
    for (const auto& [t, bytes] : by_queue[peaks[i].second]) {
      if (interval > 0 && (last < 0 ? t - interval >= 0 : t - last > 1.5 * interval)) {
        if (last >= 0) {
          x.push_back(last + interval);
          y.push_back(0);
        }
        x.push_back(t - interval);
        y.push_back(0);
      }
      x.push_back(t);
      y.push_back(bytes / 1e3);
      last = t;
    }
    if (interval > 0 && last >= 0) {
      x.push_back(last + interval);
      y.push_back(0);
    }
    chart["series"].push_back(line_series(peaks[i].second, x, y, max_points));
  }
  return chart;
}

// PFC pauses as lanes: from a port's first pause frame to its resume (or the end).
json pause_chart(const CsvTable& p, double end_us, std::size_t max_spans, json& notes) {
  const std::size_t c_time = p.column("time_us"), c_from = p.column("from"), c_to = p.column("to"),
                    c_queue = p.column("queue"), c_frame = p.column("frame");
  struct Lane {
    double first = 0;
    double open = -1;
    std::vector<std::pair<double, double>> spans;
  };
  std::map<std::string, Lane> lanes;
  for (std::size_t r = 0; r < p.rows(); ++r) {
    const double t = p.number(r, c_time);
    const std::string name = p.text(r, c_from) + " → " + p.text(r, c_to) + " q" + p.text(r, c_queue);
    const std::string& frame = p.text(r, c_frame);
    if (frame != "pause" && frame != "resume") throw DataError(fmt::format("pfc.csv: line {}: frame '{}' is not pause or resume", r + 2, frame));
    auto [it, added] = lanes.try_emplace(name);
    Lane& lane = it->second;
    if (added) lane.first = t;
    if (frame == "pause" && lane.open < 0) lane.open = t;
    if (frame == "resume" && lane.open >= 0) {
      lane.spans.emplace_back(lane.open, t);
      lane.open = -1;
    }
  }
  std::vector<std::pair<double, std::string>> order;
  for (auto& [name, lane] : lanes) {
    if (lane.open >= 0) lane.spans.emplace_back(lane.open, std::max(end_us, lane.open));
    order.emplace_back(lane.first, name);
  }
  std::sort(order.begin(), order.end());
  json names = json::array(), spans = json::array();
  std::string cascade;
  for (std::size_t i = 0; i < order.size() && i < kPauseLanes; ++i) {
    names.push_back(order[i].second);
    if (i < 6) cascade += fmt::format("{}{} at {:.1f} µs", i ? ", then " : "", order[i].second, order[i].first);
    for (const auto& [a, b] : lanes[order[i].second].spans) {
      if (spans.size() >= max_spans) break;
      spans.push_back({static_cast<int>(i), 0, a, b});
    }
  }
  if (!order.empty()) notes.push_back("PFC: the first ports to pause, in order: " + cascade + ".");
  if (order.size() > kPauseLanes)
    notes.push_back(fmt::format("PFC: {} ports paused; the first {} to pause are drawn.", order.size(), kPauseLanes));
  return {{"id", "pfc"}, {"type", "lanes"}, {"title", "PFC pauses per port"},
          {"how", "each lane a port that sent pause frames (from → to, priority), ordered by its first pause: a "
                  "cascade reads top to bottom as pauses spreading upstream"},
          {"x", "µs"}, {"lanes", names}, {"kinds", json::array({{{"name", "paused (sender told to stop)"}, {"color", "#d62728"}}})},
          {"spans", spans}, {"range", {0.0, end_us}}};
}

// Per sampling interval: ECN marks, CNPs, pause frames; and the bytes delivered as Gb/s.
void counter_charts(const CsvTable& c, std::size_t max_points, json& charts) {
  const std::size_t c_time = c.column("time_us");
  json events = {{"id", "congestion"}, {"type", "line"}, {"title", "ECN marks, CNPs and PFC pauses over time"},
                 {"how", "counts in each sampling interval"}, {"x", "µs"}, {"y", "per interval"},
                 {"series", json::array()}, {"legend", true}};
  std::vector<double> x;
  for (std::size_t r = 1; r < c.rows(); ++r) x.push_back(c.number(r, c_time));
  for (const auto& [col, label] : std::vector<std::pair<std::string, std::string>>{
           {"ecn_marks", "ECN marks"}, {"cnps", "CNPs"}, {"pfc_pauses", "PFC pause frames"}, {"drops", "drops"}}) {
    const std::size_t k = c.column(col);
    std::vector<double> y;
    for (std::size_t r = 1; r < c.rows(); ++r) y.push_back(c.number(r, k) - c.number(r - 1, k));
    events["series"].push_back(line_series(label, x, y, max_points));
  }
  charts.push_back(events);
  const std::size_t k = c.column("bytes_delivered");
  std::vector<double> y;
  for (std::size_t r = 1; r < c.rows(); ++r) {
    const double dt = c.number(r, c_time) - c.number(r - 1, c_time);
    y.push_back(dt > 0 ? (c.number(r, k) - c.number(r - 1, k)) * 8 / (dt * 1e3) : 0);
  }
  charts.push_back({{"id", "delivered"}, {"type", "line"}, {"title", "Delivered throughput, all flows"},
                    {"how", "payload bytes the receivers accepted in each sampling interval"}, {"x", "µs"},
                    {"y", "Gb/s"}, {"series", json::array({line_series("delivered", x, y, max_points)})}});
}

// Per-flow throughput and the completion-time distribution (completed flows).
void flow_charts(const CsvTable& f, std::size_t max_points, json& charts) {
  const std::size_t c_src = f.column("src"), c_dst = f.column("dst"), c_bytes = f.column("bytes"),
                    c_done = f.column("delivered_us"), c_fct = f.column("fct_us");
  std::vector<double> fct;
  json points = json::array();
  std::vector<std::size_t> done;
  for (std::size_t r = 0; r < f.rows(); ++r)
    if (!f.text(r, c_fct).empty()) done.push_back(r);
  const std::size_t step = std::max<std::size_t>(1, done.size() / std::max<std::size_t>(max_points, 1));
  for (std::size_t i = 0; i < done.size(); ++i) {
    const std::size_t r = done[i];
    const double t = f.number(r, c_fct);
    fct.push_back(t);
    if (i % step == 0 && t > 0) {
      points.push_back({{"x", f.number(r, c_done)}, {"y", f.number(r, c_bytes) * 8 / (t * 1e3)},
                        {"label", f.text(r, c_src) + " → " + f.text(r, c_dst)}});
    }
  }
  if (fct.empty()) return;
  charts.push_back({{"id", "flow_throughput"}, {"type", "scatter"}, {"title", "Per-flow throughput"},
                    {"how", step > 1 ? fmt::format("one flow in {} (of {} completed): its bytes over its completion time",
                                                   step, done.size())
                                     : "each completed flow: its bytes over its completion time"},
                    {"x", "completed at (µs)"}, {"y", "Gb/s"},
                    {"series", json::array({{{"name", "flows"}, {"points", points}}})}});
  const Curve c = cdf(fct, max_points);
  json s = {{"name", "flows"}, {"x", c.x}, {"y", c.y}, {"stepped", true}};
  charts.push_back({{"id", "fct_cdf"}, {"type", "line"}, {"title", "Flow completion times (CDF)"},
                    {"how", "the fraction of flows completed within each time"}, {"x", "flow completion time (µs)"},
                    {"y", "fraction of flows"}, {"from_zero", true}, {"series", json::array({s})}});
}

// Nodes by level: GPUs at 0, then by hops from the nearest GPU; in each level, ordered by
// the mean position of their neighbours below (so links cross little).
json topology_chart(const CsvTable& nodes, const CsvTable& links) {
  const std::size_t c_node = nodes.column("node"), c_rank = nodes.column("gpu_rank");
  const std::size_t c_from = links.column("from"), c_to = links.column("to"), c_util = links.column("utilization");
  std::map<std::string, std::size_t> index;
  for (std::size_t r = 0; r < nodes.rows(); ++r) index[nodes.text(r, c_node)] = r;
  const std::size_t n = nodes.rows();
  std::vector<std::set<std::size_t>> adjacent(n);
  std::map<std::pair<std::size_t, std::size_t>, double> util;
  for (std::size_t r = 0; r < links.rows(); ++r) {
    auto a = index.find(links.text(r, c_from)), b = index.find(links.text(r, c_to));
    if (a == index.end() || b == index.end()) throw DataError("links.csv: line " + std::to_string(r + 2) + " names a node nodes.csv lacks");
    adjacent[a->second].insert(b->second);
    adjacent[b->second].insert(a->second);
    auto key = std::minmax(a->second, b->second);
    util[key] = std::max(util[key], links.number(r, c_util));
  }
  std::vector<int> level(n, -1);
  std::vector<double> order(n, 0);
  std::deque<std::size_t> frontier;
  for (std::size_t r = 0; r < n; ++r) {
    if (nodes.text(r, c_rank).empty()) continue;
    level[r] = 0;
    order[r] = nodes.number(r, c_rank);
    frontier.push_back(r);
  }
  while (!frontier.empty()) {
    const std::size_t u = frontier.front();
    frontier.pop_front();
    for (std::size_t v : adjacent[u]) {
      if (level[v] >= 0) continue;
      level[v] = level[u] + 1;
      frontier.push_back(v);
    }
  }
  int top = 0;
  for (std::size_t r = 0; r < n; ++r) top = std::max(top, level[r]);
  for (std::size_t r = 0; r < n; ++r)
    if (level[r] < 0) level[r] = top + 1;  // unreachable from any GPU: drawn above the rest
  for (int l = 1; l <= top + 1; ++l) {
    for (std::size_t r = 0; r < n; ++r) {
      if (level[r] != l) continue;
      double sum = 0;
      int count = 0;
      for (std::size_t v : adjacent[r])
        if (level[v] < l) {
          sum += order[v];
          ++count;
        }
      order[r] = count ? sum / count : static_cast<double>(r);
    }
  }
  std::vector<std::size_t> sorted(n);
  for (std::size_t r = 0; r < n; ++r) sorted[r] = r;
  std::stable_sort(sorted.begin(), sorted.end(), [&](std::size_t a, std::size_t b) { return order[a] < order[b]; });
  json out_nodes = json::array(), out_links = json::array();
  for (std::size_t r : sorted)
    out_nodes.push_back({{"name", nodes.text(r, c_node)}, {"level", level[r]}, {"gpu", !nodes.text(r, c_rank).empty()}});
  for (const auto& [key, u] : util)
    out_links.push_back({{"a", nodes.text(key.first, c_node)}, {"b", nodes.text(key.second, c_node)}, {"utilization", u}});
  return {{"id", "topology"}, {"type", "topology"}, {"title", "Topology and link utilization"},
          {"how", "GPUs at the bottom, switches above by hops; each link coloured by the busier of its two directions "
                  "over the run (hover for figures)"},
          {"nodes", out_nodes}, {"links", out_links}};
}

}  // namespace

bool is_sim_folder(const std::string& path) {
  return is_directory(path) && file_exists(path + "/summary.json") && file_exists(path + "/links.csv");
}

SimFiles read_sim_folder(const std::string& path) {
  SimFiles files;
  for (const char* name : {"summary.json", "flows.csv", "links.csv", "queues.csv", "pfc.csv", "counters.csv", "nodes.csv"}) {
    const std::string p = path + "/" + name;
    if (file_exists(p)) files[name] = read_file(p);
  }
  return files;
}

json simulation_sections(const SimFiles& files, const std::string& name, std::size_t max_points) {
  const json summary = json::parse(file(files, "summary.json"), nullptr, false);
  if (summary.is_discarded() || !summary.is_object() || !summary.contains("topology"))
    throw DataError(name + ": summary.json is not a weft sim summary");
  const double end_us = summary.value("simulated_us", 0.0);
  const double interval = summary.value("sample_interval_us", 0.0);  // 0 (older outputs): no zero-filling
  const json topo = summary["topology"], counters = summary.value("counters", json::object()),
             flows = summary.value("flows", json::object());
  json table = {{"columns", {"figure", "value"}}, {"rows", json::array()}};
  auto row = [&](const std::string& what, const json& v) { table["rows"].push_back({what, v}); };
  row("topology", fmt::format("{} ({} GPUs, {} switches, {} links)", topo.value("name", std::string("?")),
                              topo.value("gpus", 0.0), topo.value("switches", 0.0), topo.value("links", 0.0)));
  row("simulated", fmt::format("{:.3f} µs{}", end_us, summary.value("finished", false) ? "" : " (NOT finished)"));
  row("flows", fmt::format("{}, completion mean {:.3f} µs, p99 {:.3f} µs", flows.value("count", 0.0),
                           flows.value("fct_mean_us", 0.0), flows.value("fct_p99_us", 0.0)));
  row("ECN marks / CNPs", fmt::format("{} / {}", counters.value("ecn_marks", 0.0), counters.value("cnps", 0.0)));
  row("PFC pauses", fmt::format("{} ({:.3f} µs paused in all)", counters.value("pfc_pauses", 0.0),
                                counters.value("pfc_paused_us", 0.0)));
  row("drops / retransmissions", fmt::format("{} / {}", counters.value("drops", 0.0), counters.value("retransmissions", 0.0)));
  json notes = json::array();
  const json config = summary.value("config", json::object());
  notes.push_back(fmt::format("load balancing {}, congestion control {}, PFC {}", config.value("lb", std::string("?")),
                              config.value("cc", std::string("?")), config.value("pfc", std::string("?"))));
  json charts = json::array();
  if (files.count("queues.csv")) charts.push_back(queue_chart(CsvTable(files.at("queues.csv"), "queues.csv"), interval, max_points));
  if (files.count("pfc.csv")) {
    const CsvTable pfc(files.at("pfc.csv"), "pfc.csv");
    if (pfc.rows() > 0) charts.push_back(pause_chart(pfc, end_us, max_points * 4, notes));
    else notes.push_back("PFC: no pause frames were sent.");
  }
  if (files.count("counters.csv")) counter_charts(CsvTable(files.at("counters.csv"), "counters.csv"), max_points, charts);
  if (files.count("flows.csv")) flow_charts(CsvTable(files.at("flows.csv"), "flows.csv"), max_points, charts);
  if (files.count("nodes.csv"))
    charts.push_back(topology_chart(CsvTable(files.at("nodes.csv"), "nodes.csv"), CsvTable(file(files, "links.csv"), "links.csv")));
  return json::array({{{"title", "Simulation " + name}, {"notes", notes}, {"table", table}, {"charts", charts}}});
}

}  // namespace weft::report
