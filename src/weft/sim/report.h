// What a simulation run shows: the summary a network engineer reads in ten seconds, and
// the files for a closer look (summary.json and the CSV files below), which weft report draws.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/sim/network.h"

namespace weft::sim {

nlohmann::json summary_json(const Network& net);
void print_summary(const Network& net, std::FILE* out, const std::string& out_dir);
// The files a run writes: summary.json, flows.csv, links.csv, queues.csv, pfc.csv,
// counters.csv (ECN marks, CNPs, pauses... at each sampling time), qps.csv (with
// sample.qps), nodes.csv (each node's role and GPU rank; docs/simulator.md describes every
// column). emit_outputs hands them to a sink one after another, row by row (a large run's
// flows.csv is hundreds of MB); output_files keeps them as texts by name; write_outputs
// writes them into `dir` (created when missing), each file replaced atomically.
class OutputSink {
 public:
  virtual ~OutputSink() = default;
  virtual void open(const std::string& name) = 0;
  virtual void write(std::string_view bytes) = 0;
  virtual void close() = 0;
};
void emit_outputs(const Network& net, OutputSink& out);
std::vector<std::pair<std::string, std::string>> output_files(const Network& net);
void write_outputs(const Network& net, const std::string& dir);
// Before a run that writes into `dir`: each of those files (and link.pcap) that exists
// already must be an earlier run's (summary.json from a simulation, each CSV file with its
// header's first two columns, a pcap capture), else ConfigError naming it, so that --out
// given a folder of other files overwrites none of them.
void check_outputs(const std::string& dir);

}  // namespace weft::sim
