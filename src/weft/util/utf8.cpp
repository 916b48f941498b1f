#include "weft/util/utf8.h"

#include <algorithm>

namespace weft {

namespace {

// The length of the valid sequence starting at text[i]; 0 when invalid, with *skip set to
// the bytes one U+FFFD stands for (the maximal subpart: the lead byte and the continuation
// bytes that were still possible, as Python's errors="replace" and the Unicode standard's
// practice count them); -n when the n bytes left are a valid beginning of a longer sequence.
int sequence_length(std::string_view text, std::size_t i, std::size_t* skip) {
  const auto b0 = static_cast<unsigned char>(text[i]);
  int need;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  *skip = 1;
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) need = 2;
  else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;   // no overlong forms
    if (b0 == 0xED) hi = 0x9F;   // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;   // nothing above U+10FFFF
  } else {
    return 0;
  }
  for (int k = 1; k < need; ++k) {
    if (i + static_cast<std::size_t>(k) >= text.size()) return -k;
    const auto b = static_cast<unsigned char>(text[i + static_cast<std::size_t>(k)]);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      *skip = static_cast<std::size_t>(k);
      return 0;
    }
  }
  return need;
}

}  // namespace

std::size_t utf8_complete_prefix(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t skip = 0;
    const int n = sequence_length(text, i, &skip);
    if (n < 0) return i;
    i += n == 0 ? skip : static_cast<std::size_t>(n);
  }
  return i;
}

std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t skip = 0;
    const int n = sequence_length(text, i, &skip);
    if (n > 0) {
      out.append(text.substr(i, static_cast<std::size_t>(n)));
      i += static_cast<std::size_t>(n);
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD for the maximal subpart, or the truncated end
      i += n < 0 ? static_cast<std::size_t>(-n) : skip;
    }
  }
  return out;
}

bool is_text(std::string_view head) {
  const std::string_view whole = head.substr(0, utf8_complete_prefix(head));
  const bool controls = std::any_of(whole.begin(), whole.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c < 0x20 && c != '\t' && c != '\n' && c != '\r';
  });
  return !controls && valid_utf8(whole) == whole;
}

}  // namespace weft
