// The simulation part of a report, from the files weft sim writes (--out; docs/simulator.md):
// queue occupancy of the busiest queues over time, PFC pauses per port as lanes (a cascade
// shows as pauses spreading from one port to the ports that feed it), ECN marks, CNPs and
// pauses over time, per-flow throughput, the flow-completion-time distribution, and the
// topology with its links coloured by utilization.
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace weft::report {

// File name -> text: summary.json and the CSV files (counters.csv and nodes.csv may be
// missing: outputs of older versions).
using SimFiles = std::map<std::string, std::string>;

// Whether `path` is a folder written by weft sim --out (it holds summary.json and links.csv).
bool is_sim_folder(const std::string& path);
SimFiles read_sim_folder(const std::string& path);

// The report's sections; `name` names the run. Throws DataError naming a malformed file.
nlohmann::json simulation_sections(const SimFiles& files, const std::string& name, std::size_t max_points);

}  // namespace weft::report
