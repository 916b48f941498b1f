// libFuzzer harness: the request bodies of weft serve (POST /v1/completions,
// /v1/chat/completions and /v1/classify). Every body is parsed or refused with a RequestError (HTTP 4xx).
#include <cstddef>
#include <cstdint>
#include <string>

#include "weft/serve/api.h"
#include "weft/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  weft::serve::ApiLimits limits{"model", 256, 8};
  static const weft::CharTokenizer tokenizer("abcdefghijklmnopqrstuvwxyz ");
  limits.vocab = tokenizer.vocab_size();
  try {
    weft::serve::parse_completion_request(body, limits, 64, &tokenizer);
  } catch (const weft::serve::RequestError&) {
  }
  try {
    weft::serve::parse_chat_request(body, limits, 64);
  } catch (const weft::serve::RequestError&) {
  }
  try {
    static const weft::ModelRecipe recipe = [] {
      weft::ModelRecipe r;
      r.model = "mlp";  // Fashion-MNIST's 1x28x28 images
      return r;
    }();
    weft::serve::parse_classify_request(body, limits, recipe);
  } catch (const weft::serve::RequestError&) {
  }
  return 0;
}
