// One self-contained HTML page: the report's document (title, sections of notes, a table
// and charts; docs/reports.md) as JSON inside the page, with Chart.js and the page's own
// script and style inlined, so the file opens anywhere without a network.
//
// A chart is a JSON object with an "id", a "type" and a "title" ("how": how to read it):
//   line:     "x", "y" (axis titles), "series": [{"name", "x": [...], "y": [...]}], "log_y"
//   bars:     "categories", "series": [{"name", "values"}], "stacked", "limit": {"name", "value"}
//   scatter:  "x", "y", "series": [{"name", "points": [{"x", "y", "label", "mark"}]}]
//   lanes:    "x" (time unit), "lanes": [names], "kinds": [{"name"}], "spans": [[lane, kind, start, end]]
//   topology: "nodes": [{"name", "level", "gpu"}], "links": [{"a", "b", "utilization"}]
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace weft::report {

struct Page {
  std::string title, subtitle, footer;
  nlohmann::json sections = nlohmann::json::array();  // {"title", "notes": [...], "table", "charts": [...]}
};

std::string render_page(const Page& page);

// A line chart's series {"name", "x", "y"}, decimated to at most `max_points` (series.h).
nlohmann::json line_series(const std::string& name, const std::vector<double>& x, const std::vector<double>& y,
                           std::size_t max_points);

}  // namespace weft::report
