// One block of a decoder-only transformer (seed 002 chapter 7), written once and run every
// way weft runs a GPT: training with autograd, tensor-parallel training (its products
// sliced over ranks), pipeline stages (a range of blocks), and decoding with a key-value
// cache (whole or sliced, in float32, bf16 or int8). The ways differ at two seams only, in
// the manner of vLLM's parallel linear layers and attention back ends:
//
//   BlockLinear     a matrix product on rows, y = x W^T + b: [N, in] -> [N, out]. Whole
//                   (nn::Linear), column- or row-sliced with their collectives
//                   (parallel/parallel_linear.h), packed for decoding (serve/decoder.cpp).
//   BlockAttention  causal attention of the rows of Q, K and V side by side ([N, 3w], w =
//                   the heads held x the head size) -> [N, w]: over whole sequences with
//                   autograd (CausalAttention below), against each sequence's key-value
//                   cache (serve/decoder.cpp), or over every rank's Q and K
//                   (parallel/tensor_parallel.cpp, seed 002 chapter 8).
//
// The kind of block is a BlockConfig: GPT-2's (LayerNorm, GELU, learned positions outside the
// block, biases) or the Llama family's (RMSNorm, SwiGLU, rotary position embeddings applied
// to the queries and keys here, grouped-query attention, no biases; Qwen 2's biases on Q, K
// and V; Mistral's sliding window). Each of those is decided here or in the attention back
// ends' shared kernel, once.
//
// How each product is sliced over t tensor-parallel ranks is declared here once
// (`product_slicing`, `slice_pieces`), so the ranks that train and those that decode cut the
// same parameters alike. Under no-grad (NoGradGuard) the block records nothing.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "weft/autograd/variable.h"

namespace weft {

class BlockLinear {
 public:
  virtual ~BlockLinear() = default;
  virtual Var forward(const Var& x) const = 0;  // [N, in] -> [N, out]
};

enum class Norm : std::uint8_t { kLayer, kRms };          // LayerNorm (weight, bias) | RMSNorm (weight)
enum class Activation : std::uint8_t { kGelu, kSwiGlu };  // the MLP: out(gelu(fc x)) | out(silu(gate x) up x)

// Rotary embeddings' frequency scaling for contexts past the trained one: Llama 3.1's
// ("llama3": long wavelengths divided by `factor`, a smooth ramp between) or linear (every
// frequency divided by `factor`). factor 0: none.
struct RopeScaling {
  enum Kind : std::uint8_t { kNone, kLinear, kLlama3 } kind = kNone;
  double factor = 0, low_frequency_factor = 1, high_frequency_factor = 4;
  std::int64_t original_context = 8192;
};

struct BlockConfig {
  std::int64_t dim = 128, heads = 4;
  std::int64_t kv_heads = 0;  // grouped-query attention's key-value heads (0: heads)
  std::int64_t hidden = 0;    // the MLP's width (SwiGLU: of the gate and of the up product; 0: 4 dim)
  bool pre_ln = true;         // a norm before each sublayer (GPT-2/3, Llama); else after each residual sum
  Norm norm = Norm::kLayer;
  double norm_eps = 1e-5;
  Activation mlp = Activation::kGelu;
  bool bias = true;          // the products' biases
  bool qkv_bias = true;      // Q, K and V's bias (Qwen 2 has it without the others)
  double rope_theta = 0;     // rotary position embeddings with this base (0: none)
  RopeScaling rope_scaling = {};
  std::int64_t window = 0;   // sliding-window attention over this many keys (0: all)

  std::int64_t key_value_heads() const { return kv_heads > 0 ? kv_heads : heads; }
  std::int64_t head_dim() const { return dim / heads; }
  std::int64_t mlp_width() const { return hidden > 0 ? hidden : 4 * dim; }
  bool rotary() const { return rope_theta > 0; }
  // One line naming what is wrong (ConfigError), or nothing: sizes positive, the heads
  // dividing the width and grouping the key-value heads, an even head size for rotary
  // embeddings, a window >= 0.
  void validate() const;
};

// The inverse frequencies of the rotary embeddings of one head: theta^(-2j/hd), j < hd/2,
// scaled as the config says.
std::vector<double> rotary_frequencies(const BlockConfig& c);

// The block's normalization of rows x: LayerNorm or RMSNorm with the config's eps (bias
// undefined for RMSNorm).
Var block_norm(const Var& x, const Var& weight, const Var& bias, const BlockConfig& c);

class BlockAttention {
 public:
  // `heads` query and `kv_heads` key-value heads held (this rank's, under tensor parallelism).
  BlockAttention(std::int64_t heads, std::int64_t kv_heads) : heads_(heads), kv_heads_(kv_heads) {}
  virtual ~BlockAttention() = default;
  // qkv: [N, (heads + 2 kv_heads) hd], the rows' queries, keys and values (heads side by side)
  // of block `layer` -> [N, heads hd].
  virtual Var attend(const Var& qkv, std::int64_t layer) const = 0;
  // Each of the N rows' position in its sequence (rotary embeddings turn by it).
  virtual std::vector<std::int32_t> positions(std::int64_t rows) const = 0;
  std::int64_t heads() const { return heads_; }
  std::int64_t kv_heads() const { return kv_heads_; }

 private:
  std::int64_t heads_, kv_heads_;
};

// The block's products, by their names under the block ("h<i>." + name + ".weight").
// kFc is the MLP's first product: under SwiGLU the gate's rows then the up product's.
enum class Product : std::uint8_t { kQkv, kProj, kFc, kOut };
inline constexpr std::array<Product, 4> kProducts{Product::kQkv, Product::kProj, Product::kFc, Product::kOut};
const char* product_name(Product p);  // "attn.qkv", "attn.proj", "fc", "out"
bool has_bias(Product p, const BlockConfig& c);

// How a product is sliced over tensor-parallel ranks (Megatron-LM's layout):
//   kOutputs  the output is the concatenation of parts (Q, K, V by heads; SwiGLU's gate and
//             up; or one): rank r holds rows [r·n/t, (r+1)·n/t) of each part of W and b;
//             the input is replicated, the output split
//   kInputs   the columns [r·n/t, (r+1)·n/t) of W: the partial products summed over the
//             ranks, then the bias (whole on every rank) added once
enum class Slicing : std::uint8_t { kOutputs, kInputs };
Slicing product_slicing(Product p);
// Which dimension of the weight a slicing cuts (0: rows, 1: columns), and whether it cuts the bias.
int sliced_dim(Slicing s);
bool slices_bias(Slicing s);
// The parts of a product's sliced dimension, in order (their sum is its length).
std::vector<std::int64_t> product_parts(Product p, const BlockConfig& c);
// Rank r of t's pieces (offset, length) along that dimension, in order: each part cut evenly
// (ConfigError where one does not split into t: the heads or the MLP's width).
using Pieces = std::vector<std::pair<std::int64_t, std::int64_t>>;
Pieces slice_pieces(const std::vector<std::int64_t>& parts, int rank, int size);
// The pieces along `dim` (0 or 1) of a 1-D or 2-D tensor, concatenated into a new tensor.
Tensor take_pieces(const Tensor& full, int dim, const Pieces& pieces);
// Rank r of t's slice of a product's weight ([out, in]) or, for kOutputs, bias ([out]).
Tensor product_slice(const Tensor& full, Product p, const BlockConfig& c, int rank, int size);

// One block's parameters, however its products are held. The norms are whole (their biases
// undefined under RMSNorm), a product's bias undefined where the config has none.
struct DecoderBlockParts {
  Var ln1_weight, ln1_bias, ln2_weight, ln2_bias;
  std::array<std::shared_ptr<const BlockLinear>, 4> products;  // by Product
  const BlockLinear& operator[](Product p) const { return *products[static_cast<std::size_t>(p)]; }
};

// The block on rows x [N, d] -> [N, d], as `c` says (pre-LN or post-LN, the norm, the MLP,
// rotary embeddings on the queries and keys).
Var decoder_block(const Var& x, const DecoderBlockParts& block, const BlockAttention& attention, std::int64_t layer,
                  const BlockConfig& c);
// Its halves: proj(attend(rotate(qkv(x)))) and out(act(fc(x))).
Var attention_sublayer(const Var& x, const DecoderBlockParts& block, const BlockAttention& attention,
                       std::int64_t layer, const BlockConfig& c);
Var mlp_sublayer(const Var& x, const DecoderBlockParts& block, const BlockConfig& c);

// Causal self-attention over `batch` whole sequences of `length` rows each (rows sequence by
// sequence, positions from 0), with autograd (autograd/sequence.h's causal_self_attention:
// grouped-query heads, a sliding window).
class CausalAttention : public BlockAttention {
 public:
  CausalAttention(std::int64_t batch, std::int64_t length, std::int64_t heads, std::int64_t kv_heads = 0,
                  std::int64_t window = 0)
      : BlockAttention(heads, kv_heads > 0 ? kv_heads : heads), batch_(batch), length_(length), window_(window) {}
  Var attend(const Var& qkv, std::int64_t layer) const override;
  std::vector<std::int32_t> positions(std::int64_t rows) const override;

 private:
  std::int64_t batch_, length_, window_;
};

// Blocks [begin, end) in order, `block(x, i)` each; with `recompute`, each block's
// activations are recomputed in backward (autograd checkpoint) instead of kept. `around`, if
// set, runs before (false) and after (true) each block.
Var run_block_range(const Var& x, std::int64_t begin, std::int64_t end, bool recompute,
                    const std::function<Var(const Var&, std::int64_t)>& block,
                    const std::function<void(std::int64_t, bool)>& around = {});

}  // namespace weft
