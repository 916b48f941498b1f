// What a simulation run shows: the summary a network engineer reads in ten seconds, and
// the files for a closer look (summary.json, flows.csv, links.csv, queues.csv, pfc.csv).
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "weft/sim/network.h"

namespace weft::sim {

nlohmann::json summary_json(const Network& net);
void print_summary(const Network& net, std::FILE* out, const std::string& out_dir);
// Writes the files into `dir` (created when missing).
void write_outputs(const Network& net, const std::string& dir);

}  // namespace weft::sim
