// GPT-2 models in the Hugging Face layout: a folder as `save_pretrained` writes it or the
// model hub holds it, with
//   config.json                     the sizes (n_embd, n_layer, n_head, n_positions,
//                                   vocab_size) and the variant's switches
//   model.safetensors               the parameters by Hugging Face's names ("h.0.attn.c_attn.
//                                   weight", or with "transformer." before them), or shards
//                                   listed in model.safetensors.index.json
//   vocab.json + merges.txt         the tokenizer (or tokenizer.json)
// weft's GPT is GPT-2's architecture (pre-LN blocks, learned positions, GELU's tanh form, a
// 4·d MLP, layer norms with eps 1e-5, the head tied to the token embedding), so importing is
// renaming: GPT-2's Conv1D weights are stored [in, out] and weft's Linear [out, in], so they
// are transposed; 16-bit weights become float32. A variant weft's GPT does not compute (another
// model_type, activation, eps, MLP width, attention scaling, or an untied head) is refused
// by name rather than run wrong.
#pragma once

#include <memory>
#include <string>

#include "weft/data/text.h"
#include "weft/nn/module.h"
#include "weft/nn/transformer.h"

namespace weft {

struct ImportedGpt2 {
  GptConfig config;
  StateDict parameters;  // by weft's names (GPT's state dict), float32
  std::unique_ptr<Tokenizer> tokenizer;
};

// Whether `path` is such a model: a folder with config.json and no meta.json (a checkpoint),
// or a .safetensors file with config.json beside it.
bool is_gpt2_import(const std::string& path);

// Throws CheckpointError naming the file and the problem.
ImportedGpt2 import_gpt2(const std::string& path);
// Its pieces, each read on its own (fine-tuning reads the parameters only when it builds the
// model): config.json of the folder `path` is in (or is); the tokenizer, which may not have
// more tokens than the configuration's vocabulary; the parameters by weft's names.
GptConfig gpt2_folder_config(const std::string& path);
std::unique_ptr<Tokenizer> gpt2_folder_tokenizer(const std::string& path, const GptConfig& config);
StateDict gpt2_folder_parameters(const std::string& path, const GptConfig& config);

// The pieces, for tests and tools: config.json's text -> weft's configuration, and the
// parameters by Hugging Face's names -> by weft's (every tensor checked for presence and
// shape; attention-mask buffers dropped; anything else unknown refused).
GptConfig gpt2_config(const std::string& config_json, const std::string& source);
StateDict gpt2_parameters(const StateDict& tensors, const GptConfig& config, const std::string& source);

}  // namespace weft
