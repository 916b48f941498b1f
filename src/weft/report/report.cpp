#include "weft/report/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <string_view>

#include "weft/report/plan.h"
#include "weft/report/simulation.h"
#include "weft/report/timeline.h"
#include "weft/report/training.h"
#include "weft/util/error.h"
#include "weft/util/file.h"

namespace weft::report {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A rank's own metrics file (FILE-rank<r>.jsonl, r > 0) whose rank-0 file exists: read with it.
bool is_other_rank_file(const std::string& path) {
  const std::optional<RankFile> r = split_rank_file(path);
  return r && r->rank > 0 && file_exists(r->rank0_path);
}

std::string display_name(const std::string& path) {
  fs::path p(path);
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

}  // namespace

Page make_report(const std::vector<std::string>& paths, const ReportOptions& options) {
  if (paths.empty()) throw ConfigError("weft report needs at least one path (a metrics file, a trace, a sim folder or a plan)");
  std::vector<MetricsRun> runs;
  std::vector<std::string> traces;
  json sections = json::array();
  std::vector<std::string> kinds;
  auto kind = [&](const std::string& k) {
    if (std::find(kinds.begin(), kinds.end(), k) == kinds.end()) kinds.push_back(k);
  };
  json later = json::array();  // simulations and plans, after the training runs and timeline
  auto read_path = [&](const std::string& path) {
    if (is_directory(path)) {
      if (is_sim_folder(path)) {
        for (json& s : simulation_sections(read_sim_folder(path), display_name(path), options.max_points)) later.push_back(s);
        kind("simulation");
      } else if (file_exists(path + "/metrics.jsonl")) {
        runs.push_back(read_metrics(path + "/metrics.jsonl"));
      } else {
        throw ConfigError(path + ": neither a weft sim --out folder (summary.json, links.csv) nor a run folder with "
                                 "metrics.jsonl");
      }
    } else if (is_trace_file(path)) {
      traces.push_back(path);
    } else if (is_metrics_file(path)) {
      if (!is_other_rank_file(path)) runs.push_back(read_metrics(path));
    } else {
      const json doc = json::parse(read_file(path), nullptr, false);
      if (doc.is_discarded() || !is_plan(doc))
        throw DataError(path + ": not a metrics file, a Chrome trace, a weft sim folder or a weft plan --json output");
      for (json& s : plan_sections(doc, display_name(path))) later.push_back(s);
      kind("plan");
    }
  };
  // A field of the wrong type in a file is named with the file: not as weft writes it.
  auto malformed = [](const std::string& what, const json::exception& e) {
    return DataError(what + ": not as weft writes it (" + e.what() + ")");
  };
  for (const std::string& path : paths) {
    if (!file_exists(path)) throw ConfigError(path + ": no such file or folder");
    try {
      read_path(path);
    } catch (const json::exception& e) {
      throw malformed(path, e);
    }
  }
  try {
    if (!runs.empty()) {
      for (std::size_t i = 0; i < runs.size(); ++i)  // names distinct on the legends
        for (std::size_t j = 0; j < i; ++j)
          if (runs[j].name == runs[i].name) runs[i].name = runs[i].path;
      for (json& s : training_sections(runs, options.max_points)) sections.push_back(s);
      kind(runs.size() > 1 ? "training runs" : "training run");
    }
  } catch (const json::exception& e) {
    throw malformed(runs.size() == 1 ? runs[0].path : "the metrics files", e);
  }
  if (!traces.empty()) {
    try {
      sections.push_back(timeline_section(traces, options.max_points * 10));
    } catch (const json::exception& e) {
      throw malformed(traces.size() == 1 ? traces[0] : "the traces", e);
    }
    kind("timeline");
  }
  for (json& s : later) sections.push_back(s);
  Page page;
  std::string what;
  for (std::size_t i = 0; i < kinds.size(); ++i) what += (i ? (i + 1 == kinds.size() ? " and " : ", ") : "") + kinds[i];
  page.title = options.title.empty() ? "weft: " + what : options.title;
  std::string from;
  for (const std::string& p : paths) from += (from.empty() ? "" : ", ") + p;
  page.subtitle = "from " + from;
  page.footer = "Written by weft report. Series longer than " + std::to_string(options.max_points) +
                " points keep each stretch's first, lowest, highest and last points; docs/reports.md tells how to read "
                "each chart.";
  page.sections = sections;
  return page;
}

void check_page_path(const std::string& path, const std::string& flag) {
  // Every page's style sheet opens with this comment (assets/report.css), within its first KiB.
  check_replaceable_file(path, flag, "a page weft wrote", [](std::string_view head) {
    return head.find("/* weft report: one self-contained page") != std::string_view::npos;
  });
}

std::size_t write_page(const Page& page, const std::string& path) {
  check_page_path(path, "the page");
  const std::string html = render_page(page);
  const std::string folder = fs::path(path).parent_path().string();
  if (!folder.empty()) make_directories(folder);
  write_file_atomic(path, html);
  return html.size();
}

}  // namespace weft::report
