// Numbers from text without exceptions as control flow: the whole text must be the number
// (no sign-only, no trailing characters, no overflow); nullopt otherwise, and the caller
// says what was wrong in its own words.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace weft {

std::optional<std::int64_t> parse_integer(std::string_view text);
std::optional<double> parse_number(std::string_view text);  // finite values only

}  // namespace weft
