// Arithmetic on numbers that come from outside (flags, file headers, traces, metadata): the
// exact result, or a ConfigError naming what was computed when it does not fit in 64 bits,
// never a silent wrap-around or undefined behaviour.
#pragma once

#include <cstdint>
#include <string>

#include "weft/util/error.h"

namespace weft {

inline std::int64_t checked_mul(std::int64_t a, std::int64_t b, const std::string& what) {
  std::int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out))
    throw ConfigError(what + " is too large (" + std::to_string(a) + " x " + std::to_string(b) + " overflows)");
  return out;
}

inline std::int64_t checked_add(std::int64_t a, std::int64_t b, const std::string& what) {
  std::int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out))
    throw ConfigError(what + " is too large (" + std::to_string(a) + " + " + std::to_string(b) + " overflows)");
  return out;
}

// `value` when lo <= value <= hi, else ConfigError "WHAT must be in LO..HI, got VALUE".
inline std::int64_t bounded(std::int64_t value, std::int64_t lo, std::int64_t hi, const std::string& what) {
  if (value < lo || value > hi)
    throw ConfigError(what + " must be in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + std::to_string(value));
  return value;
}

}  // namespace weft
