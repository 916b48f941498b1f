// Reading configuration from environment variables, with validation.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace weft {

// The variable's value (nullopt when unset or empty). A WEFT_ variable must be declared in
// util/environment.cpp (InternalError otherwise).
std::optional<std::string> env_string(const char* name);
// Parses a whole number from 1 to 4096 from the environment; throws ConfigError naming the
// variable when it is set to anything else.
std::optional<int> env_positive_int(const char* name);
// Parses an integer in [lo, hi]; throws ConfigError naming the variable and the range.
std::optional<std::int64_t> env_int_in(const char* name, std::int64_t lo, std::int64_t hi);
// Whether this process is its job's first attempt: no restart count above 0
// (WEFT_RESTART_COUNT of weft launch --max-restarts, TORCHELASTIC_RESTART_COUNT of torchrun).
// A restarted attempt finds its earlier attempt's files, which are its own.
bool job_first_start();

}  // namespace weft
