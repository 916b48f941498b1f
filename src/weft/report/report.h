// weft report PATH...: one self-contained page for what the paths hold (docs/reports.md):
//   a metrics file of weft train (its ranks' files beside it are read too), or a run's
//   checkpoint folder holding metrics.jsonl: a training run; several: overlaid;
//   Chrome traces (weft train --timeline): a timeline;
//   a folder written by weft sim --out: a simulation;
//   the JSON of weft plan --json or weft plan --sweep --json: a plan.
// Bad input is refused with one line naming the path.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "weft/report/page.h"

namespace weft::report {

struct ReportOptions {
  std::string title;              // default: from what the paths hold
  std::size_t max_points = 2000;  // per series (decimated beyond)
};

Page make_report(const std::vector<std::string>& paths, const ReportOptions& options);

// Throws ConfigError (naming `flag`) unless `path` can take a page: a new file in a folder
// that can be written, or a page weft wrote before, which is replaced. Any other file there
// (a metrics file given as the input, a user's own) is refused: nothing saved is lost.
void check_page_path(const std::string& path, const std::string& flag);
// Writes the page to `path` atomically (checked as above); returns its size in bytes.
std::size_t write_page(const Page& page, const std::string& path);

}  // namespace weft::report
