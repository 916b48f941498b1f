#include "weft/util/env.h"

#include <cstdlib>
#include <limits>
#include <string_view>

#include "weft/util/environment.h"
#include "weft/util/error.h"

namespace weft {

std::optional<std::string> env_string(const char* name) {
  if (std::string_view(name).rfind("WEFT_", 0) == 0 && !find_environment_variable(name))
    throw InternalError(std::string(name) + " is read but not declared in util/environment.cpp");
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::optional<int> env_positive_int(const char* name) {
  auto s = env_string(name);
  if (!s) return std::nullopt;
  char* end = nullptr;
  long v = std::strtol(s->c_str(), &end, 10);
  if (end == s->c_str() || *end != '\0' || v <= 0 || v > 4096) {
    throw ConfigError(std::string(name) + "='" + *s + "' is not a whole number from 1 to 4096");
  }
  return static_cast<int>(v);
}

}  // namespace weft

namespace weft {
std::optional<std::int64_t> env_int_in(const char* name, std::int64_t lo, std::int64_t hi) {
  auto s = env_string(name);
  if (!s) return std::nullopt;
  char* end = nullptr;
  long long v = std::strtoll(s->c_str(), &end, 10);
  if (end == s->c_str() || *end != '\0' || v < lo || v > hi) {
    throw ConfigError(std::string(name) + "='" + *s + "' is not an integer in " + std::to_string(lo) + ".." +
                      std::to_string(hi));
  }
  return v;
}

bool job_first_start() {
  for (const char* name : {"WEFT_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"})
    if (env_int_in(name, 0, std::numeric_limits<int>::max()).value_or(0) > 0) return false;
  return true;
}

}  // namespace weft
