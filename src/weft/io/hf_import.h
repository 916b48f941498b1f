// Models in the Hugging Face layout: a folder as `save_pretrained` writes it or the model hub
// holds it, with
//   config.json                     the sizes and the variant's switches; model_type gpt2,
//                                   or llama, mistral, qwen2 (the Llama family)
//   model.safetensors               the parameters by Hugging Face's names ("h.0.attn.c_attn.
//                                   weight", "model.layers.0.self_attn.q_proj.weight", with or
//                                   without the "transformer." or "model." before them), or
//                                   shards listed in model.safetensors.index.json; float32,
//                                   float16 or bfloat16
//   vocab.json + merges.txt         the tokenizer (or tokenizer.json), byte-level BPE
// Both families are weft's one decoder model (nn/transformer.h), so importing is renaming:
//   GPT-2    pre-LN blocks, learned positions, GELU's tanh form, a 4·d MLP, layer norms with
//            eps 1e-5, the head tied to the token embedding; GPT-2's Conv1D weights are stored
//            [in, out] and weft's Linear [out, in], so they are transposed
//   Llama    RMSNorm, rotary embeddings (rope_theta, Llama 3.1's or linear rope_scaling),
//            SwiGLU, grouped-query attention (num_key_value_heads), a head tied or not;
//            Mistral's sliding_window; Qwen 2's biases on Q, K and V. q_proj, k_proj and
//            v_proj become weft's one qkv product (rows stacked), gate_proj and up_proj its
//            fc product
// 16-bit weights become float32. A variant weft's model does not compute (another
// model_type, activation, eps, MLP width, attention scaling, rope scaling, head size, biases
// where the family has none) is refused by name rather than run wrong.
#pragma once

#include <memory>
#include <string>

#include "weft/data/text.h"
#include "weft/nn/module.h"
#include "weft/nn/transformer.h"

namespace weft {

// tokenizer_config.json's chat settings: the chat template's Jinja source (empty: none) and
// the BOS and EOS tokens' text.
struct HfChat {
  std::string chat_template, bos_token, eos_token;
};

struct ImportedHf {
  HfChat chat;
  GptConfig config;
  std::string model;  // weft's name for it: gpt (GPT-2) or llama (the Llama family)
  StateDict parameters;  // by weft's names (GPT's state dict), float32
  std::unique_ptr<Tokenizer> tokenizer;
};

// weft's model name for an imported configuration: "llama" under rotary positions, else "gpt".
std::string hf_model_name(const GptConfig& config);

// Whether `path` is such a model: a folder with config.json and no meta.json (a checkpoint),
// or a .safetensors file with config.json beside it.
bool is_hf_import(const std::string& path);

// Throws CheckpointError naming the file and the problem.
ImportedHf import_hf(const std::string& path);
// Its pieces, each read on its own (fine-tuning reads the parameters only when it builds the
// model): config.json of the folder `path` is in (or is); the tokenizer, which may not have
// more tokens than the configuration's vocabulary; the parameters by weft's names.
GptConfig hf_folder_config(const std::string& path);
// A config.json file on its own (CheckpointError naming it when it is missing or wrong).
GptConfig hf_config_file(const std::string& path);
// tokenizer_config.json's chat settings, when the folder has one (chat_template a string or
// a list of named templates, of which "default" is taken; a token a string or {"content"});
// CheckpointError for a malformed file.
HfChat hf_folder_chat(const std::string& path);
std::unique_ptr<Tokenizer> hf_folder_tokenizer(const std::string& path, const GptConfig& config);
StateDict hf_folder_parameters(const std::string& path, const GptConfig& config);

// The pieces, for tests and tools: config.json's text -> weft's configuration, and the
// parameters by Hugging Face's names -> by weft's (every tensor checked for presence and
// shape; attention-mask and rotary-frequency buffers dropped; anything else unknown refused).
GptConfig hf_config(const std::string& config_json, const std::string& source);
StateDict hf_parameters(const StateDict& tensors, const GptConfig& config, const std::string& source);

}  // namespace weft
