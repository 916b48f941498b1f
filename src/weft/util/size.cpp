#include "weft/util/size.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "weft/util/error.h"

namespace weft {

std::int64_t parse_size(const std::string& text, const std::string& what) {
  const std::string example = " (e.g. 8, 64K = 65536, 1MB = 10^6, 1MiB = 2^20)";
  const char* begin = text.c_str();
  char* end = nullptr;
  const double v = text.empty() || std::isspace(static_cast<unsigned char>(text[0])) ? 0 : std::strtod(begin, &end);
  if (end == nullptr || end == begin) throw ConfigError(what + ": '" + text + "' is not a size" + example);
  std::string unit(end);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const double k = 1024, d = 1000;
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "k" || unit == "kib") scale = k;
  else if (unit == "m" || unit == "mib") scale = k * k;
  else if (unit == "g" || unit == "gib") scale = k * k * k;
  else if (unit == "t" || unit == "tib") scale = k * k * k * k;
  else if (unit == "kb") scale = d;
  else if (unit == "mb") scale = d * d;
  else if (unit == "gb") scale = d * d * d;
  else if (unit == "tb") scale = d * d * d * d;
  else throw ConfigError(what + ": '" + text + "' is not a size" + example);
  const double bytes = v * scale;
  if (!std::isfinite(bytes) || bytes < 0) throw ConfigError(what + ": '" + text + "' is not a size" + example);
  if (bytes > 4.6e18) throw ConfigError(what + ": size '" + text + "' is out of range");
  if (bytes != std::floor(bytes)) throw ConfigError(what + ": '" + text + "' is not a whole number of bytes");
  return static_cast<std::int64_t>(bytes);
}

}  // namespace weft
