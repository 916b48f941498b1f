// Model specifications for planning: a parameterized decoder-only transformer with presets
// (GPT-2 124M, GPT-3 175B, Llama-3 8B/70B/405B) and exact parameter counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace weft::plan {

struct TransformerSpec {
  std::string name;
  std::int64_t layers = 12;
  std::int64_t d_model = 768;
  std::int64_t heads = 12;
  std::int64_t kv_heads = 0;  // 0: as many as heads (no grouped-query attention)
  std::int64_t ffn = 0;       // hidden size of the feed-forward block; 0: 4 d_model
  std::int64_t vocab = 50257;
  std::int64_t seq_len = 1024;
  bool tied_embeddings = true;
  bool learned_positions = true;  // GPT: a learned position table; Llama: rotary (no parameters)
  bool gated_ffn = false;         // SwiGLU: three matrices instead of two
  bool biases = true;             // GPT: biases in every linear layer
  bool layer_norm = true;         // LayerNorm (weight and bias); false: RMSNorm (weight only)

  std::int64_t kv() const { return kv_heads > 0 ? kv_heads : heads; }
  std::int64_t head_dim() const { return d_model / heads; }
  std::int64_t ffn_size() const { return ffn > 0 ? ffn : 4 * d_model; }
};

struct ParameterCount {
  std::int64_t embedding = 0;  // token (and learned position) tables
  std::int64_t attention = 0;  // per block
  std::int64_t ffn = 0;        // per block
  std::int64_t norms = 0;      // per block
  std::int64_t block = 0;      // attention + ffn + norms
  std::int64_t blocks = 0;     // block x layers
  std::int64_t final_norm = 0;
  std::int64_t lm_head = 0;    // 0 when tied to the embedding
  std::int64_t total = 0;
};

ParameterCount count_parameters(const TransformerSpec& m);

// Throws ConfigError when the heads do not fit the width, the key-value heads do not divide
// the heads, or tensor parallelism of tp does not divide the heads.
void check_shape(const TransformerSpec& m, int tp = 1);

// gpt2-124m, gpt3-175b, llama3-8b, llama3-70b, llama3-405b; throws ConfigError listing them.
TransformerSpec preset(const std::string& name);
const std::vector<std::string>& preset_names();

}  // namespace weft::plan
