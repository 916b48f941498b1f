// weft's error types. Every failure a user can cause (a bad file, config, flag or peer)
// is reported by throwing one of these with a one-line, actionable message; the CLI
// prints "error: <message>" and exits non-zero.
#pragma once

#include <stdexcept>
#include <string>

namespace weft {

// `text` on one line: control bytes (CR, LF, tab, escape...) as \r, \n, \t or \xHH, so an
// error quoting bytes from the input is still one line that cannot rewrite the terminal.
std::string one_line(const std::string& text);

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

// A failed communication: a peer that died, stalled past the timeout, or broke the
// protocol. Carries the operation, this rank, the peer and the timeout in force.
class CommError : public Error {
 public:
  explicit CommError(const std::string& message, std::string op = "", int rank = -1, int peer = -1,
                     double timeout_s = 0.0)
      : Error(message), op_(std::move(op)), rank_(rank), peer_(peer), timeout_s_(timeout_s) {}
  const std::string& op() const { return op_; }
  int rank() const { return rank_; }
  int peer() const { return peer_; }
  double timeout_s() const { return timeout_s_; }

 private:
  std::string op_;
  int rank_, peer_;
  double timeout_s_;
};

// Raised when an internal invariant does not hold: a bug in weft, or an API misuse
// such as mismatched tensor shapes.
class InternalError : public Error {
 public:
  using Error::Error;
};

// Throws ConfigError("FLAG must be a finite number, got V") for an infinite or NaN value.
void require_finite(const char* flag, double value);

[[noreturn]] void throw_check_failure(const char* condition, const std::string& message,
                                      const char* file, int line);

}  // namespace weft

// WEFT_CHECK(cond, message): throws weft::InternalError naming the condition.
#define WEFT_CHECK(cond, ...)                                                       \
  do {                                                                              \
    if (!(cond)) ::weft::throw_check_failure(#cond, std::string(__VA_ARGS__), __FILE__, __LINE__); \
  } while (0)
