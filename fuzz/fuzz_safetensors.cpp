// libFuzzer harness: safetensors files (the weights of checkpoints and saved models).
// Every input is either decoded or refused with a weft error; nothing else may happen.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "weft/io/safetensors.h"
#include "weft/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    weft::decode_safetensors(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.safetensors");
  } catch (const weft::Error&) {
  }
  return 0;
}
