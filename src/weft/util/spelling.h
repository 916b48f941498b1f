// The word a user probably meant: among `candidates`, the one nearest to `word` by edit
// distance (insertions, deletions, substitutions and swaps of neighbours, each counting 1),
// when it is at most a third of the word's length (at least 1, at most 3) away; the first
// of equally near ones; nullopt when none is that near. For "did you mean" in errors.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace weft {

std::size_t edit_distance(std::string_view a, std::string_view b);
std::optional<std::string> closest_spelling(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace weft
