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

class BlockAttention {
 public:
  virtual ~BlockAttention() = default;
  // qkv: [N, 3w], the rows' queries, keys and values (each w wide, heads side by side) of
  // block `layer` -> [N, w], the heads side by side.
  virtual Var attend(const Var& qkv, std::int64_t layer) const = 0;
};

// The block's products, by their names under the block ("h<i>." + name + ".weight").
enum class Product : std::uint8_t { kQkv, kProj, kFc, kOut };
inline constexpr std::array<Product, 4> kProducts{Product::kQkv, Product::kProj, Product::kFc, Product::kOut};
const char* product_name(Product p);  // "attn.qkv", "attn.proj", "fc", "out"

// How a product is sliced over tensor-parallel ranks (Megatron-LM's layout):
//   kHeads    Q, K and V: rank r's heads, the rows [r·d/t, (r+1)·d/t) of each (of W and b)
//   kOutputs  the rows [r·n/t, (r+1)·n/t) of W and b: the input replicated, the output split
//   kInputs   the columns [r·n/t, (r+1)·n/t) of W: the partial products summed over the
//             ranks, then the bias (whole on every rank) added once
enum class Slicing : std::uint8_t { kHeads, kOutputs, kInputs };
Slicing product_slicing(Product p);
// Which dimension of the weight a slicing cuts (0: rows, 1: columns), and whether it cuts the bias.
int sliced_dim(Slicing s);
bool slices_bias(Slicing s);
// Rank r of t's pieces (offset, length) along that dimension of length n, in order.
using Pieces = std::vector<std::pair<std::int64_t, std::int64_t>>;
Pieces slice_pieces(Slicing s, std::int64_t n, int rank, int size);
// The pieces along `dim` (0 or 1) of a 1-D or 2-D tensor, concatenated into a new tensor.
Tensor take_pieces(const Tensor& full, int dim, const Pieces& pieces);
// Rank r of t's slice of a product's weight ([out, in]) or, for kHeads and kOutputs, bias ([out]).
Tensor product_slice(const Tensor& full, Slicing s, int rank, int size);

// One block's parameters, however its products are held. The layer norms are whole.
struct DecoderBlockParts {
  Var ln1_weight, ln1_bias, ln2_weight, ln2_bias;
  std::array<std::shared_ptr<const BlockLinear>, 4> products;  // by Product
  const BlockLinear& operator[](Product p) const { return *products[static_cast<std::size_t>(p)]; }
};

// The block on rows x [N, d] -> [N, d]. pre_ln: a norm before each sublayer, inside the
// residual (GPT-2/3); else after each residual sum (the original Transformer, the seed's).
Var decoder_block(const Var& x, const DecoderBlockParts& block, const BlockAttention& attention, std::int64_t layer,
                  bool pre_ln);
// Its halves: proj(attend(qkv(x))) and out(gelu(fc(x))).
Var attention_sublayer(const Var& x, const DecoderBlockParts& block, const BlockAttention& attention,
                       std::int64_t layer);
Var mlp_sublayer(const Var& x, const DecoderBlockParts& block);

// Causal self-attention over `batch` whole sequences of `length` rows each (rows sequence by
// sequence), `heads` heads: softmax(mask(Q K^T / sqrt(hd))) V, with autograd.
class CausalAttention : public BlockAttention {
 public:
  CausalAttention(std::int64_t batch, std::int64_t length, std::int64_t heads)
      : batch_(batch), length_(length), heads_(heads) {}
  Var attend(const Var& qkv, std::int64_t layer) const override;

 private:
  std::int64_t batch_, length_, heads_;
};

// Blocks [begin, end) in order, `block(x, i)` each; with `recompute`, each block's
// activations are recomputed in backward (autograd checkpoint) instead of kept. `around`, if
// set, runs before (false) and after (true) each block.
Var run_block_range(const Var& x, std::int64_t begin, std::int64_t end, bool recompute,
                    const std::function<Var(const Var&, std::int64_t)>& block,
                    const std::function<void(std::int64_t, bool)>& around = {});

}  // namespace weft
