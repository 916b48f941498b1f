// weft report PATH...: the pages of docs/reports.md.
#include <fmt/format.h>

#include <memory>

#include "weft/cli/commands.h"
#include "weft/report/report.h"

namespace weft::cli {

void add_report_command(CLI::App& app, Action& action) {
  struct Flags {
    std::vector<std::string> paths;
    std::string out = "report.html", title;
    std::size_t max_points = 2000;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand(
      "report", "draw training runs, timelines, simulations and plans as one self-contained HTML page");
  cmd->add_option("paths", f->paths,
                  "metrics files or run folders (weft train), Chrome traces (--timeline), weft sim --out folders, "
                  "weft plan --json files")
      ->required();
  cmd->add_option("--out,-o", f->out, "the page to write")->capture_default_str();
  cmd->add_option("--title", f->title, "the page's title (default: what it shows)");
  cmd->add_option("--max-points", f->max_points, "points per series before decimation")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{100}, std::size_t{1000000}));
  cmd->callback([f, &action] {
    action = [f] {
      report::check_page_path(f->out, "--out");  // before the inputs are read
      report::ReportOptions options;
      options.title = f->title;
      options.max_points = f->max_points;
      const std::size_t bytes = report::write_page(report::make_report(f->paths, options), f->out);
      fmt::print("{}: {:.0f} KB; open it in a browser\n", f->out, static_cast<double>(bytes) / 1e3);
      return 0;
    };
  });
}

}  // namespace weft::cli
