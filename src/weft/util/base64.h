// Base64 (RFC 4648, with padding) for binary data that travels as text: a SentencePiece
// model inside a safetensors file's metadata.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace weft {

std::string base64_encode(std::string_view bytes);
// nullopt for text that is not base64 (a wrong character, wrong padding or length).
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace weft
