// UTF-8 for text a model emits byte by byte: a character-level model can sample any byte, so
// what is shown to a user is made valid here, and a stream holds back a character whose
// bytes have not all arrived yet.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace weft {

// The length of the longest prefix of `text` that does not end inside a UTF-8 sequence that
// could still be completed by more bytes (invalid bytes count as complete: they will be
// replaced, not waited for).
std::size_t utf8_complete_prefix(std::string_view text);
// `text` with every invalid or truncated sequence replaced by U+FFFD, one for each maximal
// subpart (as Python's bytes.decode(errors="replace") does): always valid UTF-8.
std::string valid_utf8(std::string_view text);
// Whether `head` (a file's first bytes, perhaps cut inside its last character) reads as
// text: valid UTF-8 with no control bytes but tab, line feed and carriage return.
bool is_text(std::string_view head);

}  // namespace weft
