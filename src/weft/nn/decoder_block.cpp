#include "weft/nn/decoder_block.h"

#include "weft/autograd/functions.h"
#include "weft/autograd/sequence.h"
#include "weft/util/error.h"

namespace weft {

const char* product_name(Product p) {
  switch (p) {
    case Product::kQkv: return "attn.qkv";
    case Product::kProj: return "attn.proj";
    case Product::kFc: return "fc";
    case Product::kOut: return "out";
  }
  return "";
}

Slicing product_slicing(Product p) {
  switch (p) {
    case Product::kQkv: return Slicing::kHeads;
    case Product::kFc: return Slicing::kOutputs;
    case Product::kProj:
    case Product::kOut: return Slicing::kInputs;
  }
  return Slicing::kOutputs;
}

int sliced_dim(Slicing s) { return s == Slicing::kInputs ? 1 : 0; }

bool slices_bias(Slicing s) { return s != Slicing::kInputs; }

Pieces slice_pieces(Slicing s, std::int64_t n, int rank, int size) {
  WEFT_CHECK(size >= 1 && rank >= 0 && rank < size, "slice_pieces: rank outside the group");
  if (s == Slicing::kHeads) {  // n = 3d: Q, K and V, each cut by heads
    WEFT_CHECK(n % (3 * size) == 0, "slice_pieces: Q, K and V do not split evenly");
    const std::int64_t d = n / 3, w = d / size;
    return {{rank * w, w}, {d + rank * w, w}, {2 * d + rank * w, w}};
  }
  WEFT_CHECK(n % size == 0, "slice_pieces: the product does not split evenly");
  const std::int64_t w = n / size;
  return {{rank * w, w}};
}

Tensor take_pieces(const Tensor& full, int dim, const Pieces& pieces) {
  if (pieces.size() == 1) return full.slice(dim, pieces[0].first, pieces[0].first + pieces[0].second).contiguous().clone();
  Shape shape = full.shape();
  std::int64_t total = 0;
  for (auto [off, len] : pieces) total += len;
  shape[static_cast<std::size_t>(dim)] = total;
  Tensor out = Tensor::zeros(shape, full.dtype());
  std::int64_t at = 0;
  for (auto [off, len] : pieces) {
    Tensor dst = out.slice(dim, at, at + len);
    dst.copy_(full.slice(dim, off, off + len));
    at += len;
  }
  return out;
}

Tensor product_slice(const Tensor& full, Slicing s, int rank, int size) {
  const int dim = full.dim() == 1 ? 0 : sliced_dim(s);
  WEFT_CHECK(full.dim() == 2 || slices_bias(s), "product_slice: a row-sliced product's bias is whole");
  return take_pieces(full, dim, slice_pieces(s, full.size(dim), rank, size));
}

Var attention_sublayer(const Var& x, const DecoderBlockParts& b, const BlockAttention& attention, std::int64_t layer) {
  return b[Product::kProj].forward(attention.attend(b[Product::kQkv].forward(x), layer));
}

Var mlp_sublayer(const Var& x, const DecoderBlockParts& b) {
  return b[Product::kOut].forward(gelu(b[Product::kFc].forward(x)));
}

Var decoder_block(const Var& x, const DecoderBlockParts& b, const BlockAttention& attention, std::int64_t layer,
                  bool pre_ln) {
  auto ln1 = [&](const Var& v) { return layer_norm(v, b.ln1_weight, b.ln1_bias); };
  auto ln2 = [&](const Var& v) { return layer_norm(v, b.ln2_weight, b.ln2_bias); };
  if (pre_ln) {
    Var h = add(x, attention_sublayer(ln1(x), b, attention, layer));
    return add(h, mlp_sublayer(ln2(h), b));
  }
  Var h = ln1(add(x, attention_sublayer(x, b, attention, layer)));
  return ln2(add(h, mlp_sublayer(h, b)));
}

Var CausalAttention::attend(const Var& qkv, std::int64_t) const {
  const std::int64_t w = qkv.size(1) / 3;
  Var att = causal_self_attention(reshape(qkv, {batch_, length_, 3 * w}), heads_);  // [B, T, w]
  return reshape(att, {batch_ * length_, w});
}

Var run_block_range(const Var& x, std::int64_t begin, std::int64_t end, bool recompute,
                    const std::function<Var(const Var&, std::int64_t)>& block,
                    const std::function<void(std::int64_t, bool)>& around) {
  Var h = x;
  for (std::int64_t i = begin; i < end; ++i) {
    if (around) around(i, false);
    h = recompute ? checkpoint([block, i](const Var& v) { return block(v, i); }, h) : block(h, i);  // (kept for backward)
    if (around) around(i, true);
  }
  return h;
}

}  // namespace weft
