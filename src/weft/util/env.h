// Reading configuration from environment variables, with validation.
#pragma once

#include <optional>
#include <string>

namespace weft {

std::optional<std::string> env_string(const char* name);
// Parses a positive integer from the environment; throws ConfigError naming the
// variable when it is set but not a positive integer.
std::optional<int> env_positive_int(const char* name);

}  // namespace weft
