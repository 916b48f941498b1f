// Transformer layers and the GPT model (seed 002 chapter 7): token embedding plus positional
// encoding, blocks of causal multi-head self-attention and a feed-forward network with
// residual connections and layer normalization (pre-LN as GPT-2/3, or post-LN as the book
// and the original Transformer), a final layer norm, and a language-model head tied to the
// token embedding. The same model, configured as the Llama family (GptConfig's block
// options): rotary positions in the blocks instead of added ones, RMSNorm, SwiGLU,
// grouped-query attention, no biases, and an untied head (`lm_head`).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "weft/nn/decoder_block.h"
#include "weft/nn/decoder_ends.h"
#include "weft/nn/language_model.h"
#include "weft/nn/linear.h"
#include "weft/nn/module.h"

namespace weft {

class Embedding : public Module {
 public:
  Embedding(std::int64_t vocab, std::int64_t dim, Rng& rng, double stddev = 0.02);
  Var forward(const Var& ids) override;  // ids: a tensor of token ids (any shape) -> shape + [dim]
  std::string describe() const override;
  Var& weight() { return weight_; }

 private:
  std::int64_t vocab_, dim_;
  Var weight_;
};

// LayerNorm (parameters "weight" and "bias"), or with Norm::kRms RMSNorm ("weight" only;
// bias() undefined).
class LayerNorm : public Module {
 public:
  explicit LayerNorm(std::int64_t dim, double eps = 1e-5, Norm kind = Norm::kLayer);
  Var forward(const Var& x) override;
  std::string describe() const override {
    return (kind_ == Norm::kRms ? "RMSNorm(" : "LayerNorm(") + std::to_string(dim_) + ")";
  }
  const Var& weight() const { return gamma_; }
  const Var& bias() const { return beta_; }

 private:
  std::int64_t dim_;
  double eps_;
  Norm kind_;
  Var gamma_, beta_;
};

// The pieces of multi-head attention (also used by tensor-parallel attention):
// [B, T, n·hd] -> [B·n, T, hd], one row block per head;
Var split_heads(const Var& x, std::int64_t heads);
// [B·n, T, hd] -> [B·T, n·hd], the heads side by side again;
Var merge_heads(const Var& x, std::int64_t batch);
// causal scaled dot-product weights softmax(mask(Q K^T / sqrt(hd))): [B·n, T, T].
Var causal_attention_weights(const Var& q, const Var& k);

// Causal multi-head self-attention: softmax(Q K^T / sqrt(d_head), masked) V per head, heads
// concatenated and projected (the block's attention sublayer, decoder_block.h, with the
// config's key-value heads, rotary embeddings and window). x: [B, T, d].
class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(const BlockConfig& config, Rng& rng);
  Var forward(const Var& x) override;
  std::string describe() const override;
  Linear& qkv() const { return *qkv_; }
  Linear& proj() const { return *proj_; }

 private:
  BlockConfig c_;
  std::shared_ptr<Linear> qkv_, proj_;
};

// The block of decoder_block.h over this module's parameters (h<i>.ln1, .attn.qkv,
// .attn.proj, .ln2, .fc, .out), whole, with autograd.
class TransformerBlock : public Module {
 public:
  TransformerBlock(const BlockConfig& config, Rng& rng);
  Var forward(const Var& x) override;  // [B, T, d] -> [B, T, d]
  std::string describe() const override { return c_.pre_ln ? "TransformerBlock(pre-LN)" : "TransformerBlock(post-LN)"; }
  DecoderBlockParts parts() const;

 private:
  BlockConfig c_;
  std::shared_ptr<LayerNorm> ln1_, ln2_;
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<Linear> fc_, out_;
};

// Positional encodings.
//   standard  Vaswani et al.: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(same),
//             positions from 0
//   book      seed 002 chapter 7: element j = sin (j even) or cos (j odd) of
//             pos / 10000^(2j/d), positions from 1 (the notes explain how it differs)
//   learned   a trained table, as GPT-2/3
//   rotary    none added: the blocks turn the queries and keys (RoPE, GptConfig::rope_theta)
enum class Positional { kLearned, kStandard, kBook, kRotary };
Positional parse_positional(const std::string& s);  // throws ConfigError
const char* positional_name(Positional p);
Tensor sinusoidal_encoding(std::int64_t positions, std::int64_t dim, Positional kind, DType dtype = DType::F32);

struct GptConfig {
  std::int64_t vocab = 256;
  std::int64_t context = 128;
  std::int64_t dim = 128;
  std::int64_t layers = 4;
  std::int64_t heads = 4;
  Positional positional = Positional::kLearned;
  bool pre_ln = true;
  bool recompute = false;  // activation recomputation per block (autograd checkpoint)
  // The block's kind (BlockConfig): GPT-2's by default; the Llama family's with kRms,
  // kSwiGlu, key-value heads, no biases, an untied head and rotary positions.
  Norm norm = Norm::kLayer;
  double norm_eps = 1e-5;
  Activation mlp = Activation::kGelu;
  std::int64_t kv_heads = 0;  // 0: heads
  std::int64_t hidden = 0;    // the MLP's width; 0: 4 dim
  bool bias = true, qkv_bias = true;
  bool tied_head = true;      // the head reuses the token embedding; else its own "lm_head.weight"
  double rope_theta = 10000;  // under Positional::kRotary
  RopeScaling rope_scaling = {};
  std::int64_t window = 0;    // sliding-window attention (0: none)

  BlockConfig block() const;  // the blocks' configuration
  // One line naming what is wrong (ConfigError), or nothing.
  void validate() const;
};

// Where a parameter of a GPT sits: the token and position embeddings (the first pipeline
// stage's), block `block`, or the final layer norm and an untied head (the last stage's).
struct GptPart {
  enum Kind : std::uint8_t { kEmbedding, kBlock, kFinalNorm } kind = kEmbedding;
  std::int64_t block = -1;
};

class GPT : public LanguageModel {
 public:
  GPT(const GptConfig& config, Rng& rng);
  // ids: [B, T] token ids (stored as numbers), T <= context -> logits [B, T, vocab].
  Var forward(const Var& ids) override;
  std::string describe() const override;
  const GptConfig& config() const { return config_; }
  void set_recompute(bool on) { config_.recompute = on; }
  // The blocks are the layers (Module::layer_prefixes): "h<i>." for block i; the hook runs
  // around each block's forward in run_blocks.
  std::vector<std::string> layer_prefixes() const override;
  // Which part a parameter (by state-dict name) belongs to; throws InternalError for a
  // name that is not this model's.
  GptPart part_of(const std::string& parameter) const;
  // The token embedding, which a tied head reuses: the first and last stage both hold it.
  static std::string tied_weight() { return "wte.weight"; }
  // The weight of the head: tied_weight(), or the untied head's "lm_head.weight" ([vocab, d]).
  std::string head_weight() const { return config_.tied_head ? tied_weight() : "lm_head.weight"; }
  void set_layer_hook(LayerHook hook) override { block_hook_ = std::move(hook); }
  std::int64_t vocab() const override { return config_.vocab; }
  std::int64_t context() const override { return config_.context; }
  // The model in pieces, for pipeline stages: forward = head(run_blocks(embed(ids), 0, L)).
  Var embed(const Var& ids);                                          // [B, T] -> [B, T, d]
  Var run_blocks(const Var& x, std::int64_t begin, std::int64_t end);  // blocks [begin, end)
  Var head(const Var& x);  // final norm and the head's projection: [B, T, d] -> [B, T, vocab]
  // The embedding and the head of decoder_ends.h over this model's parameters.
  DecoderEnds ends() const;

 private:
  GptConfig config_;
  std::shared_ptr<Embedding> tokens_, positions_;
  Tensor fixed_positions_;
  std::vector<std::shared_ptr<TransformerBlock>> blocks_;
  std::shared_ptr<LayerNorm> final_;
  std::shared_ptr<Linear> lm_head_;  // untied only
  std::function<void(std::int64_t, bool)> block_hook_;
  std::map<std::string, GptPart> part_of_child_;  // by child module name
};

}  // namespace weft
