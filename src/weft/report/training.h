// The training part of a report: a run's metrics files (weft train --metrics, or
// metrics.jsonl in its checkpoint folder; docs/reports.md) drawn as loss, validation,
// learning rate, throughput per rank, compute / communication / exposed time per step and
// memory, several runs overlaid on the same axes.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace weft::report {

struct MetricsRun {
  std::string name, path;
  nlohmann::json run = nlohmann::json::object();  // the last "run" record: what the run is
  // Each rank's step records (rank 0 first), one per step in step order: when a resumed
  // run wrote a step again, its later record.
  std::vector<std::pair<int, std::vector<nlohmann::json>>> ranks;
  const std::vector<nlohmann::json>& steps() const { return ranks.front().second; }
};

// A rank's own file of a run, FILE-rank<r>.EXT beside rank 0's FILE.EXT (weft train's naming
// for metrics and timelines): rank 0's path and r; nullopt for any other name.
struct RankFile {
  std::string rank0_path;
  int rank;
};
std::optional<RankFile> split_rank_file(const std::string& path);

// Whether the file at `path` holds metrics records (its first line is one).
bool is_metrics_file(const std::string& path);

// Reads a metrics file and its ranks' files (FILE-rank<r>.jsonl beside it). Throws
// DataError naming the file and line of a line that is not a metrics record.
MetricsRun read_metrics(const std::string& path);

// The report's sections for `runs` (names distinct).
nlohmann::json training_sections(const std::vector<MetricsRun>& runs, std::size_t max_points);

}  // namespace weft::report
