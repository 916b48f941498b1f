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

// Whether the file at `path` is a Chrome trace (util/file.h's is_chrome_trace_head).
bool is_trace_file(const std::string& path);

// The events of the Chrome traces in `paths`, each file's in its order, checked as the
// trace event format has them: every event an object with a phase ("ph", a string); its
// name, when given, a string; its process and thread ("pid", "tid"), when given, whole numbers; a timestamp ("ts"), when
// given, a finite number; a complete event ("X") with a timestamp and a finite duration of
// zero or more. A track is a process (a rank): two files that both hold events of one
// process (a rank given twice, or ranks of two runs) would draw over each other and are
// refused. Throws DataError naming the file (and the event) otherwise.
std::vector<nlohmann::json> read_traces(const std::vector<std::string>& paths);

// weft timeline merge: writes one Chrome trace of every event of `inputs` (read_traces)
// to `output`, a new file or an earlier trace (never another kind of file).
void merge_traces(const std::vector<std::string>& inputs, const std::string& output);

// The timeline section of the traces in `paths`; at most `max_spans` spans are drawn (the
// last ones: the run's steady state). Throws DataError naming a file that is not a trace.
nlohmann::json timeline_section(const std::vector<std::string>& paths, std::size_t max_spans);

}  // namespace weft::report
