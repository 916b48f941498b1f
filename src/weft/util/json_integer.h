// A whole number read from JSON that came from outside (files, the network). A JSON number
// may be a float, and converting a float outside an integer type's range is undefined
// behaviour, so an integer field is taken only when it is an integer within [lo, hi]:
// never a float cast, a wrap or a silent truncation. Header-only over the JSON type, so the
// util layer takes no JSON dependency.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>

namespace weft {

template <typename Json>
std::optional<std::int64_t> json_integer(const Json& v, std::int64_t lo = std::numeric_limits<std::int64_t>::min(),
                                         std::int64_t hi = std::numeric_limits<std::int64_t>::max()) {
  if (v.is_number_unsigned()) {
    const auto u = v.template get<std::uint64_t>();
    if (hi < 0 || u > static_cast<std::uint64_t>(hi)) return std::nullopt;
    const auto i = static_cast<std::int64_t>(u);
    return i >= lo ? std::optional<std::int64_t>(i) : std::nullopt;
  }
  if (v.is_number_integer()) {
    const auto i = v.template get<std::int64_t>();
    return i >= lo && i <= hi ? std::optional<std::int64_t>(i) : std::nullopt;
  }
  return std::nullopt;
}

}  // namespace weft
