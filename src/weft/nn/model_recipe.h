// What a saved model is: its name and the sizes of its architecture, kept next to its
// parameters (the metadata of a safetensors file, the info of a checkpoint) so that a model
// can be rebuilt for inference without the options that trained it. The keys are flat
// strings, "weft_model" plus the sizes its kind needs:
//   image models   weft_model = mlp | cnn | mlp128 | seed-cnn, weft_channels, weft_height,
//                  weft_width, weft_classes, weft_mean, weft_std (per channel, comma-
//                  separated: how pixels scaled to [0, 1] were normalized); a file without
//                  them holds a Fashion-MNIST model (1x28x28, 10 classes, 0.2860, 0.3530);
//                  weft_hidden, an MLP's hidden widths (comma-separated) when not 256,256
//   GPT            weft_model = gpt | llama, weft_vocab, weft_context, weft_dim, weft_layers,
//                  weft_heads, weft_positional (learned | standard | book | rotary), weft_pre_ln
//                  (0|1); the block's kind: weft_norm (layer | rms), weft_norm_eps, weft_mlp
//                  (gelu | swiglu), weft_mlp_width, weft_kv_heads, weft_bias, weft_qkv_bias,
//                  weft_tied_head (0|1), weft_window, weft_rope_theta, and Llama 3.1's
//                  weft_rope_scaling (linear | llama3), weft_rope_factor,
//                  weft_rope_low_frequency_factor, weft_rope_high_frequency_factor,
//                  weft_rope_original_context (each absent: GPT-2's)
//   recurrent      weft_model = rnn | rnn-sigmoid | lstm | lstm-seed, weft_vocab,
//                  weft_context, weft_dim, weft_layers
#pragma once

#include <map>
#include <memory>
#include <string>

#include "weft/nn/models.h"
#include "weft/nn/module.h"
#include "weft/nn/recurrent.h"
#include "weft/nn/transformer.h"

namespace weft {

using Metadata = std::map<std::string, std::string>;

// Whether `model` names the decoder-only transformer (nn/transformer.h's GPT class): "gpt"
// (GPT-2's block by default) or "llama" (the Llama family's: llama_config).
bool is_transformer_model(const std::string& model);

// The Llama family's block on a GPT configuration: RMSNorm (eps 1e-5), SwiGLU of width 8/3 d
// rounded up to a multiple of 8 unless `c.hidden` is set, no biases, an untied head (the
// positions stay the caller's: --model llama's default is rotary).
GptConfig llama_config(GptConfig c);

// "1024,1024": an MLP's hidden widths (1 to 64 of them, each 1 to 65536, at most 2^31
// weights between them); ConfigError else.
std::vector<std::int64_t> parse_hidden(const std::string& text);

struct ModelRecipe {
  std::string model;           // the name weft train --model takes
  GptConfig gpt;               // when is_transformer_model(model)
  RecurrentConfig recurrent;   // when model is a recurrent cell
  ImageInput image;            // an image model's input and classes
  std::vector<std::int64_t> hidden;  // the MLP's hidden widths (empty: its default 256, 256)
  // An image model's input normalization: x = (pixel / 255 - mean[c]) / std[c] (one value:
  // every channel). Fashion-MNIST's training-set figures unless the data had others.
  std::vector<double> mean{0.2860}, stddev{0.3530};

  bool is_language_model() const;
  Metadata to_metadata() const;
  // Throws CheckpointError("<source>: <problem>") for a missing or malformed key.
  static ModelRecipe from_metadata(const Metadata& metadata, const std::string& source);
  // A freshly initialized model of this recipe.
  std::shared_ptr<Module> build(Rng& rng) const;
};

}  // namespace weft
