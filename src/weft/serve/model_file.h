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

namespace weft::serve {

struct LoadedModel {
  std::string source;  // the file or folder it came from
  std::string name;    // what the API calls it: the file's name without .safetensors, or "step-N"
  ModelRecipe recipe;
  std::shared_ptr<Module> module;           // in evaluation mode
  std::unique_ptr<Tokenizer> tokenizer;     // language models only
  LanguageModel* language_model() const { return dynamic_cast<LanguageModel*>(module.get()); }
};

// Throws CheckpointError (or DataError) naming the path and the problem.
LoadedModel load_model(const std::string& path);

}  // namespace weft::serve
