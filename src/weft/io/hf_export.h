// weft's transformers written as Hugging Face folders (the inverse of hf_import.h), which
// transformers' from_pretrained and weft's own import read:
//   config.json         model_type gpt2 (weft's GPT-2-shaped GPT), or llama, mistral (a
//                       sliding window) or qwen2 (biases on Q, K and V) for the Llama family
//   model.safetensors   the parameters by Hugging Face's names ("transformer."-less GPT-2
//                       names with Conv1D weights [in, out]; "model."-prefixed Llama names,
//                       weft's qkv product split into q_proj, k_proj, v_proj and its fc
//                       product into gate_proj and up_proj), float32 or bfloat16
//   tokenizer.json      the tokenizer as a byte-level BPE (data/text.h's hf_tokenizer_json),
//   or tokenizer.model  or a SentencePiece one as its model file (as Llama 2's and Mistral's)
// A model whose shape neither family has (post-LN, sinusoidal positions, a GPT with
// grouped-query heads, ...) is refused by name rather than written wrong.
#pragma once

#include <string>

#include "weft/nn/module.h"
#include "weft/nn/transformer.h"

namespace weft {

// The family's model_type for `c` ("gpt2", "llama", "mistral", "qwen2"); ConfigError naming
// what the Hugging Face classes cannot express.
std::string hf_model_type(const GptConfig& c);
// config.json's text for `c`; `eos` the end-of-text token's id (-1: none); `dtype` the
// weights' ("F32" or "BF16", for torch_dtype).
std::string hf_config_json(const GptConfig& c, std::int32_t eos = -1, const std::string& dtype = "F32");
// weft's parameters (GPT's state dict) by Hugging Face's names, float32.
StateDict hf_tensors(const GptConfig& c, const StateDict& parameters);
// The tokenizer's files: its name in the folder and its bytes.
struct HfTokenizerFile {
  std::string name, bytes;  // "tokenizer.json" or "tokenizer.model"
};
// Writes the folder `dir` (created; refused when it exists and is not empty, so that nothing
// saved is overwritten): config.json, model.safetensors (in `dtype`: "F32" or "BF16") and
// the tokenizer's file. Each file is written whole or not at all.
void write_hf_folder(const std::string& dir, const GptConfig& c, const StateDict& parameters,
                     const HfTokenizerFile& tokenizer, const std::string& dtype = "F32", std::int32_t eos = -1);

}  // namespace weft
