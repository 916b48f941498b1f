// libFuzzer harness: a checkpoint's meta.json, as `weft train --resume`, `weft predict` and
// `weft serve` read it. The text is parsed and checked field by field (format, version,
// positions, optimizer, RNG states, checksums); what it records of the model (the recipe:
// model name and sizes) and of the tokenizer is read as loading a model reads it, and the
// recorded batch and learning rate as resuming reads them. Every refusal is a weft::Error
// (CheckpointError, DataError, ConfigError); nothing else may escape.
#include <cstddef>
#include <cstdint>
#include <string>

#include "weft/data/text.h"
#include "weft/io/checkpoint.h"
#include "weft/nn/model_recipe.h"
#include "weft/util/error.h"
#include "weft/util/parse.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const weft::CheckpointMeta meta = weft::parse_checkpoint_meta(text, "meta.json");
    for (const char* key : {"batch", "lr"}) {
      auto it = meta.info.find(key);
      if (it != meta.info.end()) (void)weft::parse_number(it->second), (void)weft::parse_integer(it->second);
    }
    const weft::ModelRecipe recipe = weft::ModelRecipe::from_metadata(meta.info, "meta.json");
    auto kind = meta.info.find("weft_tokenizer");
    auto vocabulary = meta.info.find("weft_tokenizer_vocabulary");
    if (recipe.is_language_model() && kind != meta.info.end() && vocabulary != meta.info.end())
      (void)weft::make_tokenizer(kind->second, vocabulary->second);
  } catch (const weft::Error&) {  // a named refusal (main prints it as one line)
  }
  return 0;
}
