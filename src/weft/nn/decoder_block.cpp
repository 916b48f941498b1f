#include "weft/nn/decoder_block.h"

#include <cmath>

#include "weft/autograd/functions.h"
#include "weft/autograd/sequence.h"
#include "weft/nn/decoder_ends.h"
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

bool has_bias(Product p, const BlockConfig& c) { return p == Product::kQkv ? c.qkv_bias : c.bias; }

void BlockConfig::validate() const {
  if (dim < 1 || heads < 1 || kv_heads < 0 || hidden < 0) throw ConfigError("the model's sizes must be positive");
  if (dim % heads != 0) throw ConfigError("the model size must be divisible by the number of heads");
  if (heads % key_value_heads() != 0)
    throw ConfigError("the " + std::to_string(heads) + " heads do not split into groups of " +
                      std::to_string(key_value_heads()) + " key-value heads");
  if (rotary() && head_dim() % 2 != 0) throw ConfigError("rotary embeddings need an even head size");
  if (window < 0) throw ConfigError("the attention window must be >= 0");
  if (!(norm_eps > 0)) throw ConfigError("the norm's eps must be > 0");
}

std::vector<double> rotary_frequencies(const BlockConfig& c) {
  const std::int64_t hd = c.head_dim();
  std::vector<double> f(static_cast<std::size_t>(hd / 2));
  const RopeScaling& s = c.rope_scaling;
  for (std::size_t j = 0; j < f.size(); ++j) {
    double v = std::pow(c.rope_theta, -2.0 * static_cast<double>(j) / static_cast<double>(hd));
    if (s.kind == RopeScaling::kLinear) {
      v /= s.factor;
    } else if (s.kind == RopeScaling::kLlama3) {
      // Wavelengths longer than original/low are slowed by the factor, shorter than
      // original/high kept, those between interpolated.
      const double wavelength = 2 * M_PI / v, original = static_cast<double>(s.original_context);
      if (wavelength > original / s.low_frequency_factor) {
        v /= s.factor;
      } else if (wavelength >= original / s.high_frequency_factor) {
        const double smooth = (original / wavelength - s.low_frequency_factor) /
                              (s.high_frequency_factor - s.low_frequency_factor);
        v = (1 - smooth) * v / s.factor + smooth * v;
      }
    }
    f[j] = v;
  }
  return f;
}

Var block_norm(const Var& x, const Var& weight, const Var& bias, const BlockConfig& c) {
  return c.norm == Norm::kRms ? rms_norm(x, weight, c.norm_eps) : layer_norm(x, weight, bias, c.norm_eps);
}

Slicing product_slicing(Product p) {
  return p == Product::kProj || p == Product::kOut ? Slicing::kInputs : Slicing::kOutputs;
}

int sliced_dim(Slicing s) { return s == Slicing::kInputs ? 1 : 0; }

bool slices_bias(Slicing s) { return s != Slicing::kInputs; }

std::vector<std::int64_t> product_parts(Product p, const BlockConfig& c) {
  const std::int64_t hd = c.head_dim(), q = c.heads * hd, kv = c.key_value_heads() * hd, f = c.mlp_width();
  switch (p) {
    case Product::kQkv: return {q, kv, kv};
    case Product::kProj: return {q};
    case Product::kFc: return c.mlp == Activation::kSwiGlu ? std::vector<std::int64_t>{f, f} : std::vector<std::int64_t>{f};
    case Product::kOut: return {f};
  }
  return {};
}

Pieces slice_pieces(const std::vector<std::int64_t>& parts, int rank, int size) {
  WEFT_CHECK(size >= 1 && rank >= 0 && rank < size, "slice_pieces: rank outside the group");
  Pieces pieces;
  std::int64_t at = 0;
  for (std::int64_t n : parts) {
    if (n % size != 0)
      throw ConfigError("a product of width " + std::to_string(n) + " does not split over " + std::to_string(size) +
                        " tensor-parallel ranks");
    const std::int64_t w = n / size;
    pieces.emplace_back(at + rank * w, w);
    at += n;
  }
  return pieces;
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

Tensor product_slice(const Tensor& full, Product p, const BlockConfig& c, int rank, int size) {
  const Slicing s = product_slicing(p);
  const int dim = full.dim() == 1 ? 0 : sliced_dim(s);
  WEFT_CHECK(full.dim() == 2 || slices_bias(s), "product_slice: a row-sliced product's bias is whole");
  return take_pieces(full, dim, slice_pieces(product_parts(p, c), rank, size));
}

Var attention_sublayer(const Var& x, const DecoderBlockParts& b, const BlockAttention& attention, std::int64_t layer,
                       const BlockConfig& c) {
  Var qkv = b[Product::kQkv].forward(x);
  if (c.rotary())  // the queries' and the keys' heads, side by side, turned by their rows' positions
    qkv = rotary(qkv, attention.positions(qkv.size(0)), attention.heads() + attention.kv_heads(), rotary_frequencies(c));
  return b[Product::kProj].forward(attention.attend(qkv, layer));
}

Var mlp_sublayer(const Var& x, const DecoderBlockParts& b, const BlockConfig& c) {
  const Var h = b[Product::kFc].forward(x);
  return b[Product::kOut].forward(c.mlp == Activation::kSwiGlu ? swiglu(h) : gelu(h));
}

Var decoder_block(const Var& x, const DecoderBlockParts& b, const BlockAttention& attention, std::int64_t layer,
                  const BlockConfig& c) {
  auto ln1 = [&](const Var& v) { return block_norm(v, b.ln1_weight, b.ln1_bias, c); };
  auto ln2 = [&](const Var& v) { return block_norm(v, b.ln2_weight, b.ln2_bias, c); };
  if (c.pre_ln) {
    Var h = add(x, attention_sublayer(ln1(x), b, attention, layer, c));
    return add(h, mlp_sublayer(ln2(h), b, c));
  }
  Var h = ln1(add(x, attention_sublayer(x, b, attention, layer, c)));
  return ln2(add(h, mlp_sublayer(h, b, c)));
}

Var CausalAttention::attend(const Var& qkv, std::int64_t) const {
  const std::int64_t w = qkv.size(1);
  Var att = causal_self_attention(reshape(qkv, {batch_, length_, w}), heads(), kv_heads(), window_);  // [B, T, H hd]
  return reshape(att, {batch_ * length_, att.size(2)});
}

std::vector<std::int32_t> CausalAttention::positions(std::int64_t rows) const {
  WEFT_CHECK(rows == batch_ * length_, "CausalAttention: rows are not the batch's sequences");
  return sequence_positions(batch_, length_);
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
