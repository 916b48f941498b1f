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

std::optional<std::vector<std::string_view>> split_list(std::string_view text, char sep, std::size_t max_items) {
  std::vector<std::string_view> items;
  std::size_t from = 0;
  while (true) {
    if (items.size() >= max_items) return std::nullopt;
    const std::size_t at = text.find(sep, from);
    items.push_back(text.substr(from, at == std::string_view::npos ? std::string_view::npos : at - from));
    if (at == std::string_view::npos) return items;
    from = at + 1;
  }
}

std::optional<std::vector<double>> parse_number_list(std::string_view text, char sep, std::size_t max_items) {
  const auto items = split_list(text, sep, max_items);
  if (!items) return std::nullopt;
  std::vector<double> values;
  for (std::string_view item : *items) {
    const auto v = parse_number(item);
    if (!v) return std::nullopt;
    values.push_back(*v);
  }
  return values;
}

std::optional<std::vector<std::int64_t>> parse_integer_list(std::string_view text, char sep, std::size_t max_items) {
  const auto items = split_list(text, sep, max_items);
  if (!items) return std::nullopt;
  std::vector<std::int64_t> values;
  for (std::string_view item : *items) {
    const auto v = parse_integer(item);
    if (!v) return std::nullopt;
    values.push_back(*v);
  }
  return values;
}

std::optional<std::pair<std::string_view, std::string_view>> split_pair(std::string_view text, char sep) {
  const std::size_t at = text.find(sep);
  if (at == std::string_view::npos) return std::nullopt;
  return std::pair{text.substr(0, at), text.substr(at + 1)};
}

std::optional<std::pair<std::int64_t, std::int64_t>> parse_integer_pair(std::string_view text, char sep) {
  const auto parts = split_pair(text, sep);
  if (!parts) return std::nullopt;
  const auto a = parse_integer(parts->first), b = parse_integer(parts->second);
  if (!a || !b) return std::nullopt;
  return std::pair{*a, *b};
}

}  // namespace weft
