#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "weft/cli/commands.h"
#include "weft/cli/flag_parser.h"
#include "weft/cli/yaml_config.h"
#include "weft/comm/launcher.h"
#include "weft/report/report.h"
#include "weft/report/timeline.h"
#include "weft/serve/generation.h"
#include "weft/train/train_flags.h"
#include "weft/train/loop.h"
#include "weft/train/timeline.h"
#include "weft/util/error.h"
#include "weft/util/file.h"

namespace weft::cli {

namespace {

// The run's page: its metrics (every rank's files) and the timelines its `ranks` wrote.
void write_train_report(const TrainOptions& o, int ranks) {
  std::vector<std::string> paths = {o.metrics.empty() ? o.checkpoint_dir + "/metrics.jsonl" : o.metrics};
  if (!o.timeline.empty())
    for (int r = 0; r < ranks; ++r)
      if (file_exists(timeline_path(o.timeline, r, ranks))) paths.push_back(timeline_path(o.timeline, r, ranks));
  const std::size_t bytes = report::write_page(report::make_report(paths, {}), o.report);
  fmt::print(stderr, "report: {} ({:.0f} KB)\n", o.report, static_cast<double>(bytes) / 1e3);
}

}  // namespace

void add_train_command(CLI::App& app, Action& action) {
  auto options = std::make_shared<TrainOptions>();
  CLI::App* cmd = app.add_subcommand("train", "train an image classifier or a language model");
  add_flags(cmd, train_flags(), *options);
  cmd->callback([options, cmd, &action] {
    action = [options, cmd] {
      if (!options->config_file.empty()) apply_config_file(*cmd, options->config_file);  // under the command line
      TrainOptions o = *options;
      // A flag that does not shape this run is an error; the saved configuration keeps the
      // flags that do (so that it reads back).
      const TrainOptions resolved = with_task_defaults(o);
      check_flags_apply(given_options(*cmd), resolved);
      o.config_yaml = resolved_config(*cmd, [&](const std::string& key) { return flag_applies("--" + key, resolved); });
      // A report needs the metrics on disk: beside the page when the run has no other place.
      if (!o.report.empty() && o.metrics.empty() && o.checkpoint_dir.empty())
        o.metrics = std::filesystem::path(o.report).replace_extension(".metrics.jsonl").string();
      if (!o.report.empty()) report::check_page_path(o.report, "--report");  // before the work
      o.continue_tokens = serve::continue_tokens;  // the closing sample through the key-value cache
      TrainSummary s = train(o, stdout);
      if (s.rank != 0) return 0;
      fmt::print("{}\n", s.to_json());
      std::fflush(stdout);
      if (!o.report.empty()) write_train_report(o, s.json.at("ranks").get<int>());
      return 0;
    };
  });
}

void add_timeline_command(CLI::App& app, Action& action) {
  CLI::App* cmd = app.add_subcommand("timeline", "work with the timelines weft train --timeline writes");
  cmd->require_subcommand(1);
  CLI::App* merge = cmd->add_subcommand("merge", "merge per-rank timelines into one Chrome trace (one track per rank)");
  auto out = std::make_shared<std::string>();
  auto inputs = std::make_shared<std::vector<std::string>>();
  merge->add_option("--out", *out, "the merged file")->required();
  merge->add_option("files", *inputs, "the per-rank files (FILE-rank<r>.json)")->required();
  merge->callback([out, inputs, &action] {
    action = [out, inputs] {
      report::merge_traces(*inputs, *out);
      fmt::print("{}: {} timelines merged\n", *out, inputs->size());
      return 0;
    };
  });
}

void add_demo_command(CLI::App& app, Action& action) {
  auto dir = std::make_shared<std::string>();
  auto ranks = std::make_shared<int>(4);
  CLI::App* cmd = app.add_subcommand(
      "demo", "train the CNN on Fashion-MNIST for one epoch with 4 data-parallel ranks and report the test accuracy");
  cmd->add_option("--data-dir", *dir, "where the fashion-mnist files are");
  cmd->add_option("--ranks", *ranks, "data-parallel ranks")->capture_default_str();
  cmd->callback([dir, ranks, &action] {
    action = [dir, ranks] {
      fmt::print("weft demo: a CNN (conv 32, conv 64, linear 128, linear 10) on Fashion-MNIST, 1 epoch,\n"
                 "global batch 64, SGD lr 0.01 momentum 0.9, data parallel on {} ranks (weft launch)\n",
                 *ranks);
      std::fflush(stdout);
      comm::LaunchConfig launch;
      launch.nproc_per_node = *ranks;
      launch.command = {"weft", "train", "--model", "cnn", "--epochs", "1", "--batch", "64", "--quiet"};
      if (!dir->empty()) {
        launch.command.push_back("--data-dir");
        launch.command.push_back(*dir);
      }
      return comm::launch(launch);
    };
  });
}

}  // namespace weft::cli
