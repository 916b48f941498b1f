#include "weft/nn/transformer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "weft/autograd/functions.h"
#include "weft/autograd/sequence.h"
#include "weft/nn/init.h"
#include "weft/tensor/ops.h"

namespace weft {

namespace {
// A whole nn::Linear as the block's product.
class WholeLinear : public BlockLinear {
 public:
  explicit WholeLinear(Linear& layer) : layer_(&layer) {}
  Var forward(const Var& x) const override { return layer_->forward(x); }

 private:
  Linear* layer_;
};

// The whole token embedding's rows, with autograd.
class WholeTokenRows : public TokenRows {
 public:
  explicit WholeTokenRows(Var weight) : weight_(std::move(weight)) {}
  Var rows(const std::vector<std::int32_t>& ids) const override { return embedding(weight_, ids); }

 private:
  Var weight_;
};

// A head tied to the token embedding E: logits = h E^T.
class TiedHead : public BlockLinear {
 public:
  explicit TiedHead(Var table) : table_(std::move(table)) {}
  Var forward(const Var& x) const override { return matmul(x, transpose(table_, 0, 1)); }

 private:
  Var table_;
};

}  // namespace

Embedding::Embedding(std::int64_t vocab, std::int64_t dim, Rng& rng, double stddev) : vocab_(vocab), dim_(dim) {
  weight_ = register_parameter("weight", initialization_skipped() ? Tensor::zeros({vocab, dim})
                                                                  : randn({vocab, dim}, rng, 0.0, stddev));
}

Var Embedding::forward(const Var& ids) {
  Shape out = ids.shape();
  out.push_back(dim_);
  return reshape(embedding(weight_, token_ids_of(ids.value())), out);
}

std::string Embedding::describe() const {
  return "Embedding(" + std::to_string(vocab_) + ", " + std::to_string(dim_) + ")";
}

LayerNorm::LayerNorm(std::int64_t dim, double eps, Norm kind) : dim_(dim), eps_(eps), kind_(kind) {
  gamma_ = register_parameter("weight", Tensor::ones({dim}));
  if (kind == Norm::kLayer) beta_ = register_parameter("bias", Tensor::zeros({dim}));
}

Var LayerNorm::forward(const Var& x) {
  return kind_ == Norm::kRms ? rms_norm(x, gamma_, eps_) : layer_norm(x, gamma_, beta_, eps_);
}

CausalSelfAttention::CausalSelfAttention(const BlockConfig& c, Rng& rng) : c_(c) {
  c.validate();
  const std::int64_t hd = c.head_dim();
  qkv_ = std::make_shared<Linear>(c.dim, (c.heads + 2 * c.key_value_heads()) * hd, rng, c.qkv_bias, Init::kXavierNormal);
  proj_ = std::make_shared<Linear>(c.heads * hd, c.dim, rng, c.bias, Init::kXavierNormal);
  register_module("qkv", qkv_);
  register_module("proj", proj_);
}

Var split_heads(const Var& x, std::int64_t heads) {
  const std::int64_t B = x.size(0), T = x.size(1), hd = x.size(2) / heads;
  return reshape(transpose(reshape(x, {B, T, heads, hd}), 1, 2), {B * heads, T, hd});
}

Var merge_heads(const Var& x, std::int64_t batch) {
  const std::int64_t n = x.size(0) / batch, T = x.size(1), hd = x.size(2);
  return reshape(transpose(reshape(x, {batch, n, T, hd}), 1, 2), {batch * T, n * hd});
}

Var causal_attention_weights(const Var& q, const Var& k) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  return causal_softmax(matmul(q, transpose(k, 1, 2)), scale);
}

Var CausalSelfAttention::forward(const Var& x) {
  const std::int64_t B = x.size(0), T = x.size(1), d = c_.dim;
  DecoderBlockParts parts;
  parts.products[static_cast<std::size_t>(Product::kQkv)] = std::make_shared<WholeLinear>(*qkv_);
  parts.products[static_cast<std::size_t>(Product::kProj)] = std::make_shared<WholeLinear>(*proj_);
  const CausalAttention attention(B, T, c_.heads, c_.kv_heads, c_.window);
  return reshape(attention_sublayer(reshape(x, {B * T, d}), parts, attention, 0, c_), {B, T, d});
}

std::string CausalSelfAttention::describe() const {
  std::string s = "CausalSelfAttention(" + std::to_string(c_.dim) + ", " + std::to_string(c_.heads) + " heads";
  if (c_.key_value_heads() != c_.heads) s += ", " + std::to_string(c_.key_value_heads()) + " key-value heads";
  return s + ")";
}

TransformerBlock::TransformerBlock(const BlockConfig& c, Rng& rng) : c_(c) {
  c.validate();
  const std::int64_t f = c.mlp_width();
  ln1_ = std::make_shared<LayerNorm>(c.dim, c.norm_eps, c.norm);
  attn_ = std::make_shared<CausalSelfAttention>(c, rng);
  ln2_ = std::make_shared<LayerNorm>(c.dim, c.norm_eps, c.norm);
  fc_ = std::make_shared<Linear>(c.dim, c.mlp == Activation::kSwiGlu ? 2 * f : f, rng, c.bias, Init::kXavierNormal);
  out_ = std::make_shared<Linear>(f, c.dim, rng, c.bias, Init::kXavierNormal);
  register_module("ln1", ln1_);
  register_module("attn", attn_);
  register_module("ln2", ln2_);
  register_module("fc", fc_);
  register_module("out", out_);
}

DecoderBlockParts TransformerBlock::parts() const {
  return {ln1_->weight(),
          ln1_->bias(),
          ln2_->weight(),
          ln2_->bias(),
          {std::make_shared<WholeLinear>(attn_->qkv()), std::make_shared<WholeLinear>(attn_->proj()),
           std::make_shared<WholeLinear>(*fc_), std::make_shared<WholeLinear>(*out_)}};
}

Var TransformerBlock::forward(const Var& x) {
  const std::int64_t B = x.size(0), T = x.size(1), d = x.size(2);
  const CausalAttention attention(B, T, c_.heads, c_.kv_heads, c_.window);
  return reshape(decoder_block(reshape(x, {B * T, d}), parts(), attention, 0, c_), {B, T, d});
}

Positional parse_positional(const std::string& s) {
  if (s == "learned") return Positional::kLearned;
  if (s == "standard") return Positional::kStandard;
  if (s == "book") return Positional::kBook;
  if (s == "rotary") return Positional::kRotary;
  throw ConfigError("unknown positional encoding '" + s + "' (known: learned, standard, book, rotary)");
}

const char* positional_name(Positional p) {
  switch (p) {
    case Positional::kLearned: return "learned";
    case Positional::kStandard: return "standard";
    case Positional::kBook: return "book";
    case Positional::kRotary: return "rotary";
  }
  return "learned";
}

BlockConfig GptConfig::block() const {
  BlockConfig b;
  b.dim = dim;
  b.heads = heads;
  b.kv_heads = kv_heads;
  b.hidden = hidden;
  b.pre_ln = pre_ln;
  b.norm = norm;
  b.norm_eps = norm_eps;
  b.mlp = mlp;
  b.bias = bias;
  b.qkv_bias = qkv_bias;
  b.rope_theta = positional == Positional::kRotary ? rope_theta : 0.0;
  b.rope_scaling = rope_scaling;
  b.window = window;
  return b;
}

void GptConfig::validate() const {
  if (vocab < 1 || context < 1 || dim < 1 || layers < 1) throw ConfigError("GPT sizes must be positive");
  if (positional == Positional::kRotary && !(rope_theta > 0)) throw ConfigError("rope theta must be > 0");
  block().validate();
}

Tensor sinusoidal_encoding(std::int64_t positions, std::int64_t dim, Positional kind, DType dtype) {
  Tensor pe = Tensor::empty({positions, dim}, DType::F64);
  double* p = pe.data<double>();
  for (std::int64_t pos = 0; pos < positions; ++pos) {
    for (std::int64_t j = 0; j < dim; ++j) {
      double v;
      if (kind == Positional::kBook) {
        double angle = static_cast<double>(pos + 1) / std::pow(10000.0, 2.0 * static_cast<double>(j) / dim);
        v = j % 2 == 0 ? std::sin(angle) : std::cos(angle);
      } else {
        double angle = static_cast<double>(pos) / std::pow(10000.0, static_cast<double>(j - j % 2) / dim);
        v = j % 2 == 0 ? std::sin(angle) : std::cos(angle);
      }
      p[pos * dim + j] = v;
    }
  }
  return pe.to(dtype);
}

GPT::GPT(const GptConfig& c, Rng& rng) : config_(c) {
  c.validate();
  tokens_ = std::make_shared<Embedding>(c.vocab, c.dim, rng);
  register_module("wte", tokens_);
  part_of_child_["wte"] = {GptPart::kEmbedding, -1};
  if (c.positional == Positional::kLearned) {
    positions_ = std::make_shared<Embedding>(c.context, c.dim, rng);
    register_module("wpe", positions_);
    part_of_child_["wpe"] = {GptPart::kEmbedding, -1};
  } else if (c.positional != Positional::kRotary) {
    fixed_positions_ = sinusoidal_encoding(c.context, c.dim, c.positional);
  }
  const BlockConfig block = c.block();
  for (std::int64_t i = 0; i < c.layers; ++i) {
    blocks_.push_back(std::make_shared<TransformerBlock>(block, rng));
    std::string name = "h";  // (not "h" + ...: GCC 12 warns falsely on that concatenation)
    name += std::to_string(i);
    register_module(name, blocks_.back());
    part_of_child_[name] = {GptPart::kBlock, i};
  }
  final_ = std::make_shared<LayerNorm>(c.dim, c.norm_eps, c.norm);
  register_module("ln_f", final_);
  part_of_child_["ln_f"] = {GptPart::kFinalNorm, -1};
  if (!c.tied_head) {
    lm_head_ = std::make_shared<Linear>(c.dim, c.vocab, rng, false, Init::kXavierNormal);
    register_module("lm_head", lm_head_);
    part_of_child_["lm_head"] = {GptPart::kFinalNorm, -1};
  }
}

Var GPT::forward(const Var& ids) { return head(run_blocks(embed(ids), 0, config_.layers)); }

DecoderEnds GPT::ends() const {
  DecoderEnds e{std::make_shared<WholeTokenRows>(tokens_->weight()),
                positions_ ? positions_->weight() : fixed_positions_.defined() ? Var(fixed_positions_) : Var(),
                final_->weight(), final_->bias(),
                lm_head_ ? std::shared_ptr<const BlockLinear>(std::make_shared<WholeLinear>(*lm_head_))
                         : std::make_shared<TiedHead>(tokens_->weight())};
  return e;
}

Var GPT::embed(const Var& ids) {
  WEFT_CHECK(ids.dim() == 2, "GPT: token ids must be [B, T]");
  const std::int64_t B = ids.size(0), T = ids.size(1);
  if (T > config_.context) throw ConfigError("GPT: " + std::to_string(T) + " tokens exceed the context of " +
                                             std::to_string(config_.context));
  return reshape(decoder_embed(token_ids_of(ids.value()), sequence_positions(B, T), ends()), {B, T, config_.dim});
}

Var GPT::run_blocks(const Var& x, std::int64_t begin, std::int64_t end) {
  WEFT_CHECK(0 <= begin && begin <= end && end <= config_.layers, "GPT: block range out of bounds");
  return run_block_range(
      x, begin, end, config_.recompute,
      [this](const Var& v, std::int64_t i) { return blocks_[static_cast<std::size_t>(i)]->forward(v); }, block_hook_);
}

Var GPT::head(const Var& x) {
  const std::int64_t B = x.size(0), T = x.size(1);
  return reshape(decoder_head(reshape(x, {B * T, config_.dim}), ends(), config_.block()), {B, T, config_.vocab});
}

std::string GPT::describe() const {
  const GptConfig& c = config_;
  std::string s = "GPT(vocab " + std::to_string(c.vocab) + ", context " + std::to_string(c.context) + ", d " +
                  std::to_string(c.dim) + ", " + std::to_string(c.layers) + " layers, " + std::to_string(c.heads) +
                  " heads";
  if (c.block().key_value_heads() != c.heads) s += ", " + std::to_string(c.block().key_value_heads()) + " key-value heads";
  if (c.norm == Norm::kRms) s += ", RMSNorm";
  if (c.mlp == Activation::kSwiGlu) s += ", SwiGLU " + std::to_string(c.block().mlp_width());
  if (c.positional == Positional::kRotary) s += ", rotary";
  if (c.window > 0) s += ", window " + std::to_string(c.window);
  if (!c.tied_head) s += ", untied head";
  return s + ")";
}

std::vector<std::string> GPT::layer_prefixes() const {
  std::vector<std::string> prefixes;
  for (std::int64_t i = 0; i < config_.layers; ++i) {
    std::string prefix = "h";  // (see the constructor on GCC 12)
    prefix += std::to_string(i);
    prefixes.push_back(prefix + ".");
  }
  return prefixes;
}

GptPart GPT::part_of(const std::string& parameter) const {
  // A parameter's name is its child module's name, a dot, and its name in the child.
  auto it = part_of_child_.find(parameter.substr(0, parameter.find('.')));
  if (it == part_of_child_.end()) throw InternalError("'" + parameter + "' is not a parameter of this GPT");
  return it->second;
}

}  // namespace weft
