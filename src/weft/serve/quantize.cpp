#include "weft/serve/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "weft/tensor/linalg.h"
#include "weft/tensor/thread_pool.h"
#include "weft/util/error.h"

namespace weft::serve {

namespace {

// From this many rows on, a product widens the weights once and runs the float32 GEMM.
constexpr std::int64_t kRowsForGemm = 8;
// The rows packed float32 weights are laid out for: a decoding step's (16 streams); and the
// fewest rows a product reads them for (fewer read the rows: one stream's products are
// bound by reading the weights, and with oneDNN's kernel on the packed panels one stream of
// the GPT-2 small body decoded 90.4 tokens/s in one run, against a median of 94.8 on 2 cores).
// Fewer rows go through packed_product, as bf16 and int8 weights do (8 weight rows at a time,
// 16 lanes each): one stream 1.15x the tokens/s of oneDNN's product of the rows (7 pairs of
// runs, the GPT-2 small body, 2 cores, AMD EPYC).
constexpr std::int64_t kDecodeRows = 16, kRowsForPacked = 4;

std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);  // round to nearest even
  return static_cast<std::uint16_t>(u >> 16);
}

inline float widen(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float widen(std::int8_t q) { return static_cast<float>(q); }
inline float widen(float f) { return f; }

// Dot products of x with 8 consecutive weight rows (fewer at the end: `rows`), each row
// widened from its stored type: 16 float lanes per row, so the loop vectorizes without
// reassociation flags and the 8 chains run side by side; the lanes are summed as a tree.
template <class W>
void dot8(const float* x, const W* w, std::int64_t n, int rows, float* out) {
  float acc[8][16] = {};
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int b = 0; b < rows; ++b)
      for (int k = 0; k < 16; ++k) acc[b][k] += x[i + k] * widen(w[b * n + i + k]);
  for (int b = 0; b < rows; ++b) {
    float tail = 0;
    for (std::int64_t t = i; t < n; ++t) tail += x[t] * widen(w[b * n + t]);
    for (int h = 8; h >= 1; h /= 2)
      for (int k = 0; k < h; ++k) acc[b][k] += acc[b][k + h];
    out[b] = acc[b][0] + tail;
  }
}

template <class W>
void packed_product(const Tensor& x, const W* w, const float* scale, const Tensor& bias, std::int64_t out,
                    std::int64_t in, Tensor& y) {
  const std::int64_t R = x.size(0);
  const float* xp = x.data<float>();
  const float* bp = bias.defined() ? bias.data<float>() : nullptr;
  float* yp = y.data<float>();
  // Small products run on this thread: handing them out costs more than they do.
  const std::int64_t grain = std::max<std::int64_t>(16, (std::int64_t{1} << 17) / std::max<std::int64_t>(in * R, 1));
  const std::int64_t blocks = (out + 7) / 8;
  parallel_loop(blocks, std::max<std::int64_t>(1, grain / 8), [&](std::int64_t begin, std::int64_t end) {
    float d[8];
    for (std::int64_t blk = begin; blk < end; ++blk) {
      const std::int64_t o0 = blk * 8;
      const int rows = static_cast<int>(std::min<std::int64_t>(8, out - o0));
      for (std::int64_t r = 0; r < R; ++r) {
        dot8(xp + r * in, w + o0 * in, in, rows, d);
        for (int b = 0; b < rows; ++b)
          yp[r * out + o0 + b] = (scale ? scale[o0 + b] : 1.0f) * d[b] + (bp ? bp[o0 + b] : 0.0f);
      }
    }
  });
}

// One row of activations as int8 codes: its scale (its largest magnitude / 127; NaN when
// the row holds an infinity or a NaN, its codes then all 0) and the sum of its codes.
// Written to vectorize (a row of 3,072 is read twice per product): the largest magnitude
// from the bits of |x| (in IEEE order as integers, with NaN above infinity), and each code
// from values, not references, so that the loop's bounds cannot alias the int8 stores.
struct QuantizedRow {
  float scale;
  std::int32_t sum;
};

// The bits of |*x|.
inline std::uint32_t magnitude_bits(const float* x) {
  std::uint32_t bits;
  std::memcpy(&bits, x, sizeof bits);
  return bits & 0x7fffffffu;
}

inline QuantizedRow quantize_row(const float* x, const std::int64_t n, std::int8_t* q) {
  std::uint32_t lane[8] = {};
  std::int64_t e = 0;
  for (; e + 8 <= n; e += 8)
    for (int l = 0; l < 8; ++l) lane[l] = std::max(lane[l], magnitude_bits(x + e + l));
  for (; e < n; ++e) lane[0] = std::max(lane[0], magnitude_bits(x + e));
  std::uint32_t top = 0;
  for (std::uint32_t v : lane) top = std::max(top, v);
  constexpr std::uint32_t kInfinity = 0x7f800000u;
  if (top >= kInfinity) return {std::numeric_limits<float>::quiet_NaN(), 0};
  if (top == 0) return {0.0f, 0};
  float m;
  std::memcpy(&m, &top, sizeof m);
  const float xs = m / 127.0f;
  if (!(xs > 0)) return {0.0f, 0};  // (a largest magnitude so small that its scale underflows)
  std::int32_t sum = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto code = static_cast<std::int32_t>(std::clamp(std::nearbyint(x[i] / xs), -127.0f, 127.0f));
    q[i] = static_cast<std::int8_t>(code);
    sum += code;
  }
  return {xs, sum};
}

// x times the int8 weights in VNNI panels (scale per output channel) as an int8 product:
// each row of x quantized with its own symmetric scale (its largest magnitude / 127, chosen
// anew for every call: dynamic per-token quantization, so that one row of large activations
// does not cost the others their precision), exact int32 sums scaled by the weights' scales,
// then each row by its own. Blocks of rows and of channels run on the pool. A row with an
// infinite or NaN activation gives NaN outputs; a row of zeros, zeros.
Tensor int8_product(const Tensor& x, const Int8Panels& w, int width, const std::vector<float>& scale,
                    const Tensor& bias) {
  const std::int64_t R = x.size(0), in = w.in(), in4 = w.padded_in(), out = w.out();
  const float* xp = x.data<float>();
  std::vector<float> row_scale(static_cast<std::size_t>(R));
  std::vector<std::int32_t> row_sum(static_cast<std::size_t>(R));
  std::vector<std::int8_t> qx(static_cast<std::size_t>(R * in4), 0);
  // (Rows in fours: a decoding step's 16 rows go to both threads.)
  parallel_loop(R, 4, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const QuantizedRow q = quantize_row(xp + r * in, in, qx.data() + r * in4);
      row_scale[static_cast<std::size_t>(r)] = q.scale;
      row_sum[static_cast<std::size_t>(r)] = q.sum;
    }
  });
  Tensor y = Tensor::empty({R, out});  // every element written by the products below
  // Blocks of at most 64 rows and of 64-channel multiples (the kernels' 4 panels), about 8 of
  // them when the rows are few; both depend only on the shape.
  const std::int64_t row_block = 64, row_blocks = (R + row_block - 1) / row_block;
  const std::int64_t col_block =
      row_blocks > 1 ? (out + 63) / 64 * 64 : std::max<std::int64_t>(64, ((out + 7) / 8 + 63) / 64 * 64);
  const std::int64_t col_blocks = (out + col_block - 1) / col_block;
  const float* bp = bias.defined() ? bias.data<float>() : nullptr;
  parallel_for(row_blocks * col_blocks, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t b = begin; b < end; ++b) {
      const std::int64_t r0 = (b / col_blocks) * row_block, o0 = (b % col_blocks) * col_block;
      w.product(qx.data() + r0 * in4, std::min(row_block, R - r0), in4, row_sum.data() + r0, row_scale.data() + r0,
                scale.data(), bp, y.data<float>() + r0 * out, out, o0, std::min(out, o0 + col_block), width);
    }
  });
  return y;
}

}  // namespace

WeightFormat parse_weight_format(const std::string& name) {
  if (name == "fp32") return WeightFormat::kF32;
  if (name == "bf16") return WeightFormat::kBf16;
  if (name == "int8") return WeightFormat::kInt8;
  throw ConfigError("unknown weight format '" + name + "' (known: fp32, bf16, int8)");
}

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32: return "fp32";
    case WeightFormat::kBf16: return "bf16";
    case WeightFormat::kInt8: return "int8";
  }
  return "fp32";
}

PackedLinear::PackedLinear(const Tensor& weight, const Tensor& bias, WeightFormat format, bool row_lookups)
    : format_(format), out_(weight.size(0)), in_(weight.size(1)), bias_(bias) {
  const Tensor w = weight.contiguous();
  const float* p = w.data<float>();
  const std::int64_t n = out_ * in_;
  switch (format) {
    case WeightFormat::kF32:
      f32_ = w;
      if (row_lookups || out_ == 0 || in_ == 0) break;
      // The column blocks ops::gemm takes for a few rows, each packed for a decoding step's
      // rows (kDecodeRows).
      {
        const ops::GemmBlocks blocks = ops::gemm_blocks(1, out_);
        const std::int64_t width = blocks.by_rows ? out_ : blocks.size;
        for (std::int64_t c0 = 0; c0 < out_; c0 += width)
          f32_blocks_.emplace_back(p + c0 * in_, in_, std::min(width, out_ - c0), in_, kDecodeRows);
      }
      break;
    case WeightFormat::kBf16:
      bf16_.resize(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) bf16_[static_cast<std::size_t>(i)] = to_bf16(p[i]);
      break;
    case WeightFormat::kInt8:
      int8_.resize(static_cast<std::size_t>(n));
      scale_.resize(static_cast<std::size_t>(out_));
      for (std::int64_t o = 0; o < out_; ++o) {
        float top = 0;
        for (std::int64_t i = 0; i < in_; ++i) top = std::max(top, std::abs(p[o * in_ + i]));
        const float s = top > 0 ? top / 127.0f : 1.0f;
        scale_[static_cast<std::size_t>(o)] = s;
        for (std::int64_t i = 0; i < in_; ++i)
          int8_[static_cast<std::size_t>(o * in_ + i)] =
              static_cast<std::int8_t>(std::clamp(std::nearbyint(p[o * in_ + i] / s), -127.0f, 127.0f));
      }
      vnni_ = in_ <= Int8Panels::kMostInputs ? vnni_width() : 0;
      if (vnni_ != 0) {
        panels_ = Int8Panels(int8_.data(), out_, in_);
        std::vector<std::int8_t>().swap(int8_);
      }
      break;
  }
}

Tensor PackedLinear::forward(const Tensor& x) const {
  WEFT_CHECK(x.dim() == 2 && x.size(1) == in_, "PackedLinear: input must be [R, in]");
  if (format_ == WeightFormat::kF32 && x.size(0) < kRowsForPacked) {
    Tensor y = Tensor::empty({x.size(0), out_});
    packed_product(x.contiguous(), f32_.data<float>(), nullptr, bias_, out_, in_, y);
    return y;
  }
  if (format_ == WeightFormat::kF32 && f32_blocks_.empty()) return ops::linear(x, f32_, bias_.defined() ? &bias_ : nullptr);
  if (format_ == WeightFormat::kF32) {
    const Tensor xc = x.contiguous();
    const std::int64_t R = x.size(0);
    Tensor y = Tensor::empty({R, out_});
    if (bias_.defined()) y.copy_(bias_);  // broadcast into every row, then accumulate
    const float* xp = xc.data<float>();
    float* yp = y.data<float>();
    const std::int64_t width = f32_blocks_.front().n();  // every block's but maybe the last's
    parallel_for(static_cast<std::int64_t>(f32_blocks_.size()), 1, [&](std::int64_t first, std::int64_t last) {
      for (std::int64_t b = first; b < last; ++b)
        f32_blocks_[static_cast<std::size_t>(b)].matmul(R, xp, in_, yp + b * width, out_, bias_.defined());
    });
    return y;
  }
  const Tensor xc = x.contiguous();
  if (vnni_ != 0) return int8_product(xc, panels_, vnni_, scale_, bias_);
  if (x.size(0) >= kRowsForGemm) {
    // Many rows (a prefill, a large batch): widen the whole matrix once and use the GEMM.
    Tensor w = Tensor::empty({out_, in_});
    parallel_loop(out_, 64, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t o = begin; o < end; ++o) row(o, w.data<float>() + o * in_);
    });
    return ops::linear(xc, w, bias_.defined() ? &bias_ : nullptr);
  }
  Tensor y = Tensor::empty({x.size(0), out_});
  if (format_ == WeightFormat::kBf16) packed_product(xc, bf16_.data(), nullptr, bias_, out_, in_, y);
  else packed_product(xc, int8_.data(), scale_.data(), bias_, out_, in_, y);
  return y;
}

void PackedLinear::row(std::int64_t o, float* out) const {
  for (std::int64_t i = 0; i < in_; ++i) {
    const auto k = static_cast<std::size_t>(o * in_ + i);
    switch (format_) {
      case WeightFormat::kF32: out[i] = f32_.data<float>()[k]; break;
      case WeightFormat::kBf16: out[i] = widen(bf16_[k]); break;
      case WeightFormat::kInt8:
        out[i] = scale_[static_cast<std::size_t>(o)] * static_cast<float>(vnni_ != 0 ? panels_.at(o, i) : int8_[k]);
        break;
    }
  }
}

std::int64_t PackedLinear::packed_copy_bytes() const {
  std::int64_t packed = 0;
  for (const auto& b : f32_blocks_) packed += b.bytes();
  return packed;
}

std::int64_t PackedLinear::bytes() const {
  switch (format_) {
    case WeightFormat::kF32: return out_ * in_ * 4;
    case WeightFormat::kBf16: return out_ * in_ * 2;
    case WeightFormat::kInt8: return (vnni_ != 0 ? panels_.bytes() : out_ * in_) + out_ * 4;
  }
  return 0;
}

}  // namespace weft::serve
