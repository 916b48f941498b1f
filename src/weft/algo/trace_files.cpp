#include "weft/algo/trace_files.h"

#include <dirent.h>

#include <iterator>
#include <memory>

#include "weft/util/parse.h"

namespace weft::algo {

std::string trace_file_name(int rank) { return "rank-" + std::to_string(rank) + ".jsonl"; }

std::optional<int> trace_file_rank(std::string_view name) {
  constexpr std::string_view prefix = "rank-", suffix = ".jsonl";
  if (name.size() <= prefix.size() + suffix.size() || name.substr(0, prefix.size()) != prefix ||
      name.substr(name.size() - suffix.size()) != suffix)
    return std::nullopt;
  const auto rank = parse_integer(name.substr(prefix.size(), name.size() - prefix.size() - suffix.size()));
  if (!rank || *rank < 0 || *rank > kMaxTraceRank) return -1;
  return static_cast<int>(*rank);
}

std::optional<TraceFolder> list_trace_folder(const std::string& dir) {
  std::unique_ptr<DIR, int (*)(DIR*)> folder(opendir(dir.c_str()), &closedir);  // closed on every error too
  if (!folder) return std::nullopt;
  TraceFolder out;
  while (const dirent* e = readdir(folder.get())) {
    const std::string_view name = e->d_name;
    if (const std::optional<int> rank = trace_file_rank(name)) {
      if (*rank < 0) out.unexpected.emplace_back(name);
      else out.files[*rank] = dir + "/" + std::string(name);
    }
  }
  return out;
}

std::optional<std::string> trace_files_past(const std::string& dir, int world) {
  const std::optional<TraceFolder> folder = list_trace_folder(dir);
  if (!folder) return std::nullopt;  // not there yet
  const auto past = folder->files.lower_bound(world);
  const auto count = std::distance(past, folder->files.end());
  if (count == 0) return std::nullopt;
  const int first = past->first, last = folder->files.rbegin()->first;
  if (count == 1) return trace_file_name(first);
  return std::to_string(count) + " trace files (" + trace_file_name(first) + " to " + trace_file_name(last) + ")";
}

}  // namespace weft::algo
