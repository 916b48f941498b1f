// Model specifications for planning: a parameterized decoder-only transformer, dense or
// mixture-of-experts, with presets (GPT-2 124M, GPT-3 175B, Llama-3 8B/70B/405B, Mixtral
// 8x7B) and exact parameter counts (total, and active per token for mixtures of experts).
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
  bool dropout = true;            // GPT: dropout after attention and the MLP (its masks are activations)
  // Mixture of experts (Shazeer et al. 2017; Mixtral, DeepSeek): each MoE layer's
  // feed-forward block is `experts` routed experts of hidden size expert_ffn (0: ffn), of which
  // a router (d x experts) picks top_k per token, plus `shared_experts` every token uses; the
  // first `dense_layers` layers keep a dense feed-forward block.
  std::int64_t experts = 0;  // 0: a dense model
  std::int64_t top_k = 2;
  std::int64_t expert_ffn = 0;
  std::int64_t shared_experts = 0;
  std::int64_t dense_layers = 0;
  // Expert capacity (GShard, Lepikhin et al. 2021; Switch Transformer, Fedus et al. 2022):
  // each expert takes at most capacity_factor x tokens x top_k / experts tokens of a batch;
  // its slots are computed and sent whether filled or not, and tokens beyond them are
  // dropped. 0: dropless (every routed copy, no padding: Mixtral, MegaBlocks).
  double capacity_factor = 0;
  // Multi-head latent attention (DeepSeek-V2/V3): queries through a q_lora_rank bottleneck
  // (0: none), keys and values from one kv_lora_rank latent per token (what the cache keeps,
  // with the qk_rope_dim rotary key); per head qk_nope_dim + qk_rope_dim query/key
  // dimensions and v_head_dim value dimensions. kv_lora_rank 0: ordinary attention.
  std::int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope_dim = 0, qk_rope_dim = 0, v_head_dim = 0;

  std::int64_t kv() const { return kv_heads > 0 ? kv_heads : heads; }
  std::int64_t head_dim() const { return d_model / heads; }
  std::int64_t ffn_size() const { return ffn > 0 ? ffn : 4 * d_model; }
  bool moe() const { return experts > 0; }
  // Token copies an MoE layer computes and sends per token: top_k, or the capacity's slots.
  double routed_copies() const {
    return capacity_factor > 0 ? capacity_factor * static_cast<double>(top_k) : static_cast<double>(top_k);
  }
  std::int64_t expert_size() const { return expert_ffn > 0 ? expert_ffn : ffn_size(); }
  std::int64_t moe_layers() const { return moe() ? layers - dense_layers : 0; }
  bool is_moe_layer(std::int64_t layer) const { return moe() && layer >= dense_layers; }
  bool mla() const { return kv_lora_rank > 0; }
  // The width the attention scores and values work in, d for ordinary attention:
  // heads x (query/key dims + value dims) / 2 (the attention FLOPs are 12 L s x this per token).
  double attention_width() const {
    return mla() ? static_cast<double>(heads) * static_cast<double>(qk_nope_dim + qk_rope_dim + v_head_dim) / 2.0
                 : static_cast<double>(d_model);
  }
  // Values the key-value cache keeps per token and layer: 2 x kv heads x head dim, or the
  // latent and the rotary key with MLA.
  std::int64_t kv_cache_values() const { return mla() ? kv_lora_rank + qk_rope_dim : 2 * kv() * head_dim(); }
};

struct ParameterCount {
  std::int64_t embedding = 0;  // token (and learned position) tables
  std::int64_t attention = 0;  // per block
  std::int64_t ffn = 0;        // per block (dense layers)
  std::int64_t norms = 0;      // per block
  std::int64_t block = 0;      // attention + ffn + norms (a dense layer)
  // Mixture of experts, per MoE layer: the router, one routed expert, the shared experts;
  // moe_block is a whole MoE layer (attention, norms, router, every expert).
  std::int64_t router = 0, expert = 0, shared = 0, moe_block = 0;
  std::int64_t blocks = 0;     // every layer
  std::int64_t final_norm = 0;
  std::int64_t lm_head = 0;    // 0 when tied to the embedding
  std::int64_t total = 0;
  // Used per token: a MoE layer counts top_k routed experts (total == active for dense models).
  std::int64_t active = 0;
  // The parameters a GPU holds for one layer, by kind: the experts are the part expert
  // parallelism divides.
  std::int64_t layer_without_experts(bool moe_layer) const { return moe_layer ? moe_block - expert_params() : block; }
  std::int64_t expert_params() const { return moe_block - attention - norms - router - shared; }
};

ParameterCount count_parameters(const TransformerSpec& m);

// Throws ConfigError when the heads do not fit the width, the key-value heads do not divide
// the heads, or tensor parallelism of tp does not divide the heads.
void check_shape(const TransformerSpec& m, int tp = 1);

// gpt2-124m, gpt3-175b, llama3-8b, llama3-70b, llama3-405b, mixtral-8x7b, deepseek-v3;
// throws ConfigError listing them.
TransformerSpec preset(const std::string& name);
const std::vector<std::string>& preset_names();

}  // namespace weft::plan
