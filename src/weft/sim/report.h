// What a simulation run shows: the summary a network engineer reads in ten seconds, and
// the files for a closer look (summary.json and the CSV files below), which weft report draws.
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/sim/network.h"

namespace weft::sim {

nlohmann::json summary_json(const Network& net);
void print_summary(const Network& net, std::FILE* out, const std::string& out_dir);
// The files a run writes, by name, with their text: summary.json, flows.csv, links.csv,
// queues.csv, pfc.csv, counters.csv (ECN marks, CNPs, pauses... at each sampling time),
// nodes.csv (each node's role and GPU rank; docs/simulator.md describes every column).
std::vector<std::pair<std::string, std::string>> output_files(const Network& net);
// Writes output_files into `dir` (created when missing).
void write_outputs(const Network& net, const std::string& dir);

}  // namespace weft::sim
