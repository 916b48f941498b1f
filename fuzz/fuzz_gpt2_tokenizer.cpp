// libFuzzer harness: GPT-2 tokenizer files (vocab.json + merges.txt, or tokenizer.json, as a
// user's model folder holds them) and the text they encode (prompts from the network). The
// input is the pieces separated by NUL bytes: the mode ('j': tokenizer.json, else the two
// files), the file(s), then the text. Files are loaded or refused with a weft error; a
// loaded tokenizer must encode any text to ids that decode to it (as valid UTF-8).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "weft/data/text.h"
#include "weft/util/error.h"
#include "weft/util/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> parts(1);
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] == 0 && parts.size() < 4) parts.emplace_back();
    else parts.back() += static_cast<char>(data[i]);
  }
  parts.resize(4);
  try {
    const bool combined = parts[0] == "j";
    auto t = combined ? weft::Gpt2Tokenizer::from_tokenizer_json(parts[1], "tokenizer.json")
                      : weft::Gpt2Tokenizer::from_files(parts[1], parts[2], "vocab.json and merges.txt");
    const std::string& text = combined ? parts[2] : parts[3];
    const std::vector<std::int32_t> ids = t->encode(text);
    for (std::int32_t id : ids)
      if (id < 0 || id >= t->vocab_size()) __builtin_trap();
    // (A tokenizer.json's added tokens may spell any text; the byte-level round trip holds
    // for the two files, whose only special token is <|endoftext|>.)
    if (!combined && t->decode(ids) != weft::valid_utf8(text)) __builtin_trap();
    weft::make_tokenizer("gpt2", t->vocabulary());
  } catch (const weft::Error&) {
  }
  return 0;
}
