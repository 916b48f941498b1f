#include "weft/util/parse.h"

#include <charconv>
#include <cmath>

namespace weft {

std::optional<std::int64_t> parse_integer(std::string_view text) {
  std::int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end || text.empty()) return std::nullopt;
  return v;
}

std::optional<double> parse_number(std::string_view text) {
  double v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end || text.empty() || !std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace weft
