// Numbers, lists and pairs from text without exceptions as control flow: the whole text must
// be what is asked (no sign-only, no trailing characters, no overflow, no empty item);
// nullopt otherwise, and the caller says what was wrong in its own words. Every option,
// environment variable and file field that holds a list ("2:1", "a,b"), a range
// ("MIN:MAX") or a pair ("RANK:MS", "STEP:RANKS") is read through these.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace weft {

std::optional<std::int64_t> parse_integer(std::string_view text);
std::optional<double> parse_number(std::string_view text);  // finite values only

// The items of `text` between the separators, empty ones included (so that the item's parser
// refuses "2::1" and "a,"); at most `max_items` (nullopt beyond). An empty text is one empty item.
std::optional<std::vector<std::string_view>> split_list(std::string_view text, char sep,
                                                        std::size_t max_items = 1 << 20);
// A list of numbers or integers ("2:1", "0.5,1"): nullopt when an item is not one.
std::optional<std::vector<double>> parse_number_list(std::string_view text, char sep, std::size_t max_items = 1 << 20);
std::optional<std::vector<std::int64_t>> parse_integer_list(std::string_view text, char sep,
                                                            std::size_t max_items = 1 << 20);
// "A:B" (a range MIN:MAX, a pair RANK:VALUE): the text split at the first `sep`; nullopt
// without one. The integer form requires both sides to be integers.
std::optional<std::pair<std::string_view, std::string_view>> split_pair(std::string_view text, char sep = ':');
std::optional<std::pair<std::int64_t, std::int64_t>> parse_integer_pair(std::string_view text, char sep = ':');

}  // namespace weft
