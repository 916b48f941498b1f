// The files of a trace folder (docs/trace-format.md): one rank-<r>.jsonl per rank, written by
// a real run's ranks (WEFT_TRACE, comm/trace.h) or by weft plan --emit-workload, read by
// weft sim. The name's one definition for the writers and the reader.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace weft::algo {

// The most ranks a trace folder names (2^24).
inline constexpr int kMaxTraceRank = 1 << 24;

// "rank-<rank>.jsonl".
std::string trace_file_name(int rank);

// What a file name in a trace folder is: std::nullopt for a name of another kind (not
// rank-*.jsonl), the rank for rank-<r>.jsonl with r in [0, kMaxTraceRank], -1 for a
// rank-*.jsonl whose middle is not such a number (the reader refuses it).
std::optional<int> trace_file_rank(std::string_view name);

// A trace folder's rank files: each rank's path (DIR/rank-<r>.jsonl), and the rank-*.jsonl
// names that give no rank (in the folder's order). std::nullopt when DIR cannot be opened
// (absent, not a folder).
struct TraceFolder {
  std::map<int, std::string> files;
  std::vector<std::string> unexpected;
};
std::optional<TraceFolder> list_trace_folder(const std::string& dir);

// The rank files of folder `dir` past a job of `world` ranks (rank >= world: another job's,
// which a replay of the folder would mix with this one's), named for a message:
// "rank-4.jsonl", or "4 trace files (rank-4.jsonl to rank-7.jsonl)"; std::nullopt when there
// are none (or no folder yet).
std::optional<std::string> trace_files_past(const std::string& dir, int world);

}  // namespace weft::algo
