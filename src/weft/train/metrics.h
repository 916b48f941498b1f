// Per-step metrics of a training run as JSON lines (docs/reports.md lists the fields): one
// "run" record when a run starts (or resumes), then one "step" record per optimizer step,
// with the validation result on the steps that evaluated. Every line is flushed as it is
// written, so a run that dies leaves every finished step on disk.
//
// A run that resumes from a checkpoint appends: its steps after the resume point replace the
// earlier attempt's (readers keep the last record of each step: read_metrics does).
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace weft {

class MetricsLog {
 public:
  // Opens every file in `paths` (creating its folder); `append` keeps what they hold.
  MetricsLog(const std::vector<std::string>& paths, bool append);
  // Writes `record` as one line to every file; Error naming the file when a write fails
  // (a full disk: the run stops rather than go on without its record).
  void write(const nlohmann::json& record);

 private:
  std::vector<std::string> paths_;
  std::vector<std::unique_ptr<std::FILE, int (*)(std::FILE*)>> files_;
};

}  // namespace weft
