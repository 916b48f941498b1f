// weft's error types. Every failure a user can cause (a bad file, config, flag or peer)
// is reported by throwing one of these with a one-line, actionable message; the CLI
// prints "error: <message>" and exits non-zero.
#pragma once

#include <stdexcept>
#include <string>

namespace weft {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A wrong command-line value or configuration.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A missing, truncated or corrupt data file.
class DataError : public Error {
 public:
  using Error::Error;
};

// A checkpoint that cannot be written, or read back.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

// Raised when an internal invariant does not hold: a bug in weft, or an API misuse
// such as mismatched tensor shapes.
class InternalError : public Error {
 public:
  using Error::Error;
};

[[noreturn]] void throw_check_failure(const char* condition, const std::string& message,
                                      const char* file, int line);

}  // namespace weft

// WEFT_CHECK(cond, message): throws weft::InternalError naming the condition.
#define WEFT_CHECK(cond, ...)                                                       \
  do {                                                                              \
    if (!(cond)) ::weft::throw_check_failure(#cond, std::string(__VA_ARGS__), __FILE__, __LINE__); \
  } while (0)
