#include "weft/util/error.h"

#include <cmath>
#include <cstring>
#include <sstream>

namespace weft {

void require_finite(const char* flag, double value) {
  if (std::isfinite(value)) return;
  std::ostringstream text;
  text << flag << " must be a finite number, got " << value;
  throw ConfigError(text.str());
}

void throw_check_failure(const char* condition, const std::string& message, const char* file,
                         int line) {
  const char* base = std::strrchr(file, '/');
  std::string where = std::string(base ? base + 1 : file) + ":" + std::to_string(line);
  std::string text = message.empty() ? std::string("check failed: ") + condition
                                     : message + " (" + condition + ")";
  throw InternalError(text + " [" + where + "]");
}

std::string one_line(const std::string& text) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace weft
