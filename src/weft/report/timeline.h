// The timeline part of a report: the Chrome traces of a run (weft train --timeline, one per
// rank or merged) drawn as lanes, a compute and a communication lane per rank (forward,
// backward, the optimizer, each collective, pipeline sends and receives), so that the
// pipeline bubble shows as the gaps in the compute lanes.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace weft::report {

// Whether the file at `path` is a Chrome trace (a JSON object with "traceEvents").
bool is_trace_file(const std::string& path);

// The timeline section of the traces in `paths`; at most `max_spans` spans are drawn (the
// last ones: the run's steady state). Throws DataError naming a file that is not a trace.
nlohmann::json timeline_section(const std::vector<std::string>& paths, std::size_t max_spans);

}  // namespace weft::report
