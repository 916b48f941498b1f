#include "weft/report/training.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "weft/report/page.h"
#include "weft/util/error.h"
#include "weft/util/file.h"
#include "weft/util/stats.h"

namespace weft::report {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

double field(const json& r, const std::string& key) {
  auto it = r.find(key);
  return it != r.end() && it->is_number() ? it->get<double>() : kNan;
}

// The records of one file: the last run record, and the step records by step.
void read_records(const std::string& path, json& run, std::vector<json>& steps) {
  const std::string text = read_file(path);
  std::map<std::int64_t, json> by_step;
  std::size_t start = 0, line_no = 0;
  while (start < text.size()) {
    std::size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(start, nl - start);
    start = nl + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json r = json::parse(line, nullptr, false);
    const auto bad = [&](const std::string& why) {
      return DataError(fmt::format("{}: line {}: {} (not a weft metrics file?)", path, line_no, why));
    };
    if (r.is_discarded() || !r.is_object()) throw bad("not a JSON object");
    const std::string kind = r.value("kind", std::string());
    if (kind == "run") {
      run = r;
    } else if (kind == "step") {
      if (!r.contains("step") || !r["step"].is_number_integer() || r["step"].get<std::int64_t>() < 0)
        throw bad("a step record without a step number");
      if (!std::isfinite(field(r, "loss"))) throw bad("a step record without a loss");
      const auto step = r["step"].get<std::int64_t>();
      by_step[step] = std::move(r);
    } else {
      throw bad("a record of unknown kind '" + kind + "'");
    }
  }
  steps.clear();
  for (auto& [step, r] : by_step) steps.push_back(std::move(r));
}

// Per-step values of `key` (the steps that have it).
void column(const std::vector<json>& steps, const std::string& key, double scale, std::vector<double>& x,
            std::vector<double>& y) {
  x.clear();
  y.clear();
  for (const json& r : steps) {
    const double v = field(r, key);
    if (!std::isfinite(v)) continue;
    x.push_back(field(r, "step"));
    y.push_back(v * scale);
  }
}

json line_chart(const std::string& id, const std::string& title, const std::string& how, const std::string& x_label,
                const std::string& y_label) {
  return {{"id", id}, {"type", "line"}, {"title", title}, {"how", how}, {"x", x_label}, {"y", y_label},
          {"series", json::array()}};
}

std::string unit_of(const MetricsRun& r) { return r.run.value("unit", std::string("samples")); }

// Of n steps (or points of a series), the first ones that are warm-up: the first tenth,
// left out of the steady-state medians and of the steady steps' range.
std::size_t warm_up_count(std::size_t n) { return n / 10; }

// A few warm-up steps far above the rest (a first step of 430 ms against 5 ms) would flatten
// every other step against the axis: the axis then ends a little above the steady steps'
// highest value (the first tenth of each series left out, as the medians do), and the chart
// says which steps run off its top (the page labels them with their values).
void off_scale_above(json& chart) {
  double steady = 0, highest = 0;
  for (const json& s : chart["series"]) {
    const auto& ys = s["y"];
    for (std::size_t i = 0; i < ys.size(); ++i) {
      const double v = ys[i].get<double>();
      highest = std::max(highest, v);
      if (i >= warm_up_count(ys.size())) steady = std::max(steady, v);
    }
  }
  if (steady <= 0 || highest <= 2 * steady) return;
  chart["y_max"] = steady * 1.15;
  chart["how"] = chart["how"].get<std::string>() +
                 fmt::format("; steps above {:.3g} {} (warm-up) run off the top, labelled with their values",
                             steady * 1.15, chart["y"].get<std::string>());
}

}  // namespace

std::optional<RankFile> split_rank_file(const std::string& path) {
  static const std::regex rank_file(R"((.*)-rank([0-9]{1,6})(\.[^./]*)?)");
  std::smatch m;
  if (!std::regex_match(path, m, rank_file)) return std::nullopt;
  return RankFile{m[1].str() + m[3].str(), std::stoi(m[2].str())};
}

bool is_metrics_file(const std::string& path) {
  if (!file_exists(path) || is_directory(path)) return false;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  json first = json::parse(line, nullptr, false);
  return first.is_object() && first.contains("kind") && (first["kind"] == "run" || first["kind"] == "step");
}

MetricsRun read_metrics(const std::string& path) {
  MetricsRun m;
  m.path = path;
  const fs::path p(path);
  const std::string stem = p.stem().string(), ext = p.extension().string();
  // A run's name: its folder's for metrics.jsonl, else the file's ("fp32.metrics.jsonl": fp32).
  m.name = p.filename() == "metrics.jsonl" && p.has_parent_path() ? p.parent_path().filename().string() : stem;
  if (m.name.size() > 8 && m.name.compare(m.name.size() - 8, 8, ".metrics") == 0) m.name.resize(m.name.size() - 8);
  std::vector<json> steps;
  read_records(path, m.run, steps);
  if (steps.empty()) throw DataError(path + ": no step records (the run had not finished a step)");
  m.ranks.emplace_back(0, std::move(steps));
  // The other ranks' files beside it.
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  std::vector<std::pair<int, std::string>> others;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::optional<RankFile> r = split_rank_file(e.path().string());
    if (r && r->rank > 0 && fs::path(r->rank0_path).filename() == p.filename()) others.emplace_back(r->rank, e.path().string());
  }
  std::sort(others.begin(), others.end());
  for (const auto& [rank, file] : others) {
    json ignored;
    read_records(file, ignored, steps);
    if (!steps.empty()) m.ranks.emplace_back(rank, std::move(steps));
  }
  return m;
}

json training_sections(const std::vector<MetricsRun>& runs, std::size_t max_points) {
  json sections = json::array();
  // The figures of each run.
  json table = {{"columns", {"run", "model", "layout", "precision", "steps", "last loss", "evaluation", "throughput",
                             "step (median)"}},
                {"rows", json::array()}};
  json notes = json::array();
  for (const MetricsRun& r : runs) {
    const auto& steps = r.steps();
    std::vector<double> seconds, rate;
    std::string eval = "-";
    for (const json& s : steps) {
      seconds.push_back(field(s, "seconds"));
      rate.push_back(field(s, unit_of(r) + "_per_second"));
      if (std::isfinite(field(s, "test_accuracy"))) eval = fmt::format("test accuracy {:.2f}%", 100 * field(s, "test_accuracy"));
      if (std::isfinite(field(s, "val_loss"))) eval = fmt::format("validation loss {:.4f}", field(s, "val_loss"));
    }
    // Steady state: the warm-up steps left out of the medians.
    const std::size_t skip = warm_up_count(steps.size());
    std::vector<double> steady_rate(rate.begin() + static_cast<std::ptrdiff_t>(skip), rate.end());
    std::vector<double> steady_seconds(seconds.begin() + static_cast<std::ptrdiff_t>(skip), seconds.end());
    table["rows"].push_back({r.name, r.run.value("model", std::string("?")), r.run.value("layout", std::string("?")),
                             r.run.value("precision", std::string("?")), field(steps.back(), "step"),
                             field(steps.back(), "loss"), eval,
                             fmt::format("{:.0f} {}/s per rank", percentile(steady_rate, 0.5), unit_of(r)),
                             fmt::format("{:.2f} ms", 1e3 * percentile(steady_seconds, 0.5))});
    if (r.run.contains("strategies"))
      notes.push_back(fmt::format("{}: {} rank(s), {}; strategies: {}", r.name, r.run.value("ranks", 1.0),
                                  r.run.value("layout", std::string()), r.run["strategies"].get<std::string>()));
  }
  notes.push_back("Throughput and step medians leave out the first tenth of the steps (warm-up).");
  sections.push_back({{"title", runs.size() == 1 ? "Training run " + runs[0].name : "Training runs compared"},
                      {"notes", notes},
                      {"table", table}});

  const bool several = runs.size() > 1;
  // A series' name: the run's (several runs) and what it is.
  auto name_of = [&](const MetricsRun& r, const std::string& what) {
    return several ? (what.empty() ? r.name : r.name + ": " + what) : (what.empty() ? r.name : what);
  };
  std::vector<double> x, y;
  json loss = line_chart("loss", "Loss", "the training loss of each step; validation (dashed) where evaluated", "step",
                         "loss");
  // Accuracy (%) and validation loss have charts of their own: one axis for both would
  // read a loss of 0.5 as an accuracy of 0.5 %.
  json eval = line_chart("validation", "Test accuracy", "the evaluation made after those steps", "step",
                         "test accuracy (%)");
  json eval_loss = line_chart("validation_loss", "Validation loss", "the evaluation made after those steps", "step",
                              "validation loss");
  json lr = line_chart("lr", "Learning rate", "the rate each step used (schedule and warm-up)", "step", "learning rate");
  // One throughput chart per unit (samples/s and tokens/s are not one axis).
  std::vector<std::string> units;
  for (const MetricsRun& r : runs)
    if (std::find(units.begin(), units.end(), unit_of(r)) == units.end()) units.push_back(unit_of(r));
  std::map<std::string, json> rates;
  for (const std::string& unit : units)
    rates[unit] = line_chart(units.size() == 1 ? "throughput" : "throughput_" + unit,
                             units.size() == 1 ? "Throughput per rank" : "Throughput per rank (" + unit + ")",
                             "each rank's own rate on each step", "step", unit + "/s");
  json time = line_chart("step_time", "Step time: compute, communication, exposed",
                         "per step on rank 0: compute; communication (launch to finish, overlapped or not); "
                         "exposed: the communication the step waited for",
                         "step", "ms");
  json memory = line_chart("memory", "Memory", "bytes the rank holds after each step, and the step's peak above them",
                           "step", "MB");
  // Several runs: each keeps one colour on every chart, the page's colour of its index (its
  // second and third kinds of series dashed and dotted); one run: each kind of series its own.
  std::size_t run_index = 0;
  const auto in_run_colour = [&](json s, const char* style = nullptr) {
    if (several) {
      s["run"] = run_index;
      if (style) s[style] = true;
    }
    return s;
  };
  for (const MetricsRun& r : runs) {
    const auto& steps = r.steps();
    column(steps, "loss", 1, x, y);
    loss["series"].push_back(in_run_colour(line_series(name_of(r, several ? "" : "training loss"), x, y, max_points)));
    column(steps, "val_loss", 1, x, y);
    if (!x.empty()) {
      json s = in_run_colour(line_series(name_of(r, "validation"), x, y, max_points));
      s["dashed"] = true;
      s["points"] = true;
      loss["series"].push_back(s);
      eval_loss["series"].push_back(in_run_colour(line_series(name_of(r, "validation loss"), x, y, max_points)));
      eval_loss["series"].back()["points"] = true;
    }
    column(steps, "test_accuracy", 100, x, y);
    if (!x.empty()) {
      eval["series"].push_back(in_run_colour(line_series(name_of(r, "test accuracy"), x, y, max_points)));
      eval["series"].back()["points"] = true;
    }
    column(steps, "lr", 1, x, y);
    lr["series"].push_back(in_run_colour(line_series(name_of(r, several ? "" : "learning rate"), x, y, max_points)));
    const std::string unit = unit_of(r);
    for (const auto& [rank, rank_steps] : r.ranks) {
      column(rank_steps, unit + "_per_second", 1, x, y);
      rates[unit]["series"].push_back(
          in_run_colour(line_series(fmt::format("{}rank {}", several ? r.name + " " : "", rank), x, y, max_points)));
    }
    for (const char* part : {"compute", "comm", "exposed"}) {
      column(steps, std::string(part) + "_seconds", 1e3, x, y);
      if (x.empty()) continue;
      const std::string label = std::string(part) == "comm" ? "communication" : part;
      const char* style = std::string(part) == "comm" ? "dashed" : std::string(part) == "exposed" ? "dotted" : nullptr;
      time["series"].push_back(in_run_colour(line_series(name_of(r, label), x, y, max_points), style));
    }
    column(steps, "memory_bytes", 1e-6, x, y);
    memory["series"].push_back(in_run_colour(line_series(name_of(r, "held"), x, y, max_points)));
    column(steps, "peak_step_bytes", 1e-6, x, y);
    memory["series"].push_back(in_run_colour(line_series(name_of(r, "step peak"), x, y, max_points), "dashed"));
    ++run_index;
  }
  off_scale_above(time);
  json charts = json::array({loss});
  if (!eval["series"].empty()) charts.push_back(eval);
  if (!eval_loss["series"].empty()) charts.push_back(eval_loss);
  charts.push_back(lr);
  for (const std::string& unit : units) charts.push_back(rates[unit]);
  charts.push_back(time);
  charts.push_back(memory);
  for (json& c : charts) c["legend"] = true;
  sections.push_back({{"title", "Curves"}, {"charts", charts}});
  return sections;
}

}  // namespace weft::report
