#include "weft/algo/trace_files.h"

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

}  // namespace weft::algo
