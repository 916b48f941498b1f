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

}  // namespace weft
