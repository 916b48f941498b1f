// Loading a trained model for inference: a safetensors file written by
// `weft train --save-model`, a checkpoint folder (step-N), or a checkpoint directory (its
// newest checkpoint). Both record the model's recipe (nn/model_recipe.h) and, for a language
// model, its tokenizer, so nothing about the training run has to be repeated. A model trained
// with pipeline or tensor parallelism is saved whole, and loads the same way.
#pragma once

#include <memory>
#include <string>

#include "weft/data/text.h"
#include "weft/nn/language_model.h"
#include "weft/nn/model_recipe.h"
#include "weft/serve/chat_template.h"

namespace weft::serve {

struct LoadedModel {
  std::string source;  // the file or folder it came from
  std::string name;    // what the API calls it: the file's name without .safetensors, or "step-N"
  ModelRecipe recipe;
  std::shared_ptr<Module> module;           // in evaluation mode
  std::unique_ptr<Tokenizer> tokenizer;     // language models only
  // A Hugging Face folder's chat template (tokenizer_config.json), with its BOS and EOS
  // tokens' text; ChatML (EOS "<|im_end|>") for a language model without one of its own
  // (chat_is_default); none, with why (chat_error), for one whose own does not parse.
  std::shared_ptr<const ChatTemplate> chat;
  std::string bos_token, eos_token, chat_error = "the model has no chat template";
  bool chat_is_default = false;
  LanguageModel* language_model() const { return dynamic_cast<LanguageModel*>(module.get()); }
  // The prompt of a conversation (messages: [{"role", "content"}, ...]) by the chat template,
  // with the generation prompt after it; ChatTemplateError naming the problem.
  std::string chat_prompt(const nlohmann::json& messages) const;
};

// Throws CheckpointError (or DataError) naming the path and the problem.
LoadedModel load_model(const std::string& path);

// Writes a loaded transformer as a Hugging Face folder `out` (io/hf_export.h), its weights in
// `dtype` ("F32" or "BF16"), its tokenizer as tokenizer.json (char, gpt2) or tokenizer.model
// (SentencePiece). ConfigError, before anything is written, for a model or tokenizer without
// such a form or an `out` that is not new or empty.
struct HfExport {
  std::string model_type, tokenizer_file;  // "llama", "tokenizer.json", ...
};
HfExport export_hf(const LoadedModel& m, const std::string& out, const std::string& dtype);

}  // namespace weft::serve
