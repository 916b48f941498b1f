#include "weft/serve/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "weft/serve/int8_row.h"
#include "weft/tensor/shared_chunks.h"
#include "weft/tensor/stealing_ranges.h"
#include "weft/tensor/thread_pool.h"
#include "weft/util/error.h"

namespace weft::serve {

namespace {

std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);  // round to nearest even
  return static_cast<std::uint16_t>(u >> 16);
}

// How a product of R rows and `out` channels runs on the pool: in units of at most 64 rows
// and 64 channels (4 panels of 16), numbered row block by row block, channels in order, and
// dealt to the active threads as contiguous ranges (tensor/stealing_ranges.h). A thread takes
// its own units in order, so while it computes one it fetches the first panels of the next
// (the products' ahead_end); one that runs out takes the back half of another's range, so a
// thread held off its core by a busy machine leaves its units to the other. Cutting 16
// rows into 6-8 blocks taken in turns instead left each block's first pass reading memory
// with nothing overlapped (bench/README.md, session 73). Every output is computed whole in
// one unit: results do not depend on who takes which. A product too small to share runs on
// this thread. unit(r0, rows, o0, o1, ahead_end). Each thread calls prepare() once before
// its first unit (the int8 products quantize their rows there, in the same hand-over).
template <class Prepare, class Unit>
void run_product_units(std::int64_t R, std::int64_t out, bool small, const Prepare& prepare, const Unit& unit) {
  constexpr std::int64_t kRows = 64, kChannels = 64;
  const std::int64_t channel_units = (out + kChannels - 1) / kChannels, units = (R + kRows - 1) / kRows * channel_units;
  const int lanes = small || in_parallel_for() ? 1 : static_cast<int>(std::min<std::int64_t>(get_active_threads(), units));
  StealingRanges ranges(units, std::max(lanes, 1));
  parallel_for(lanes, 1, [&](std::int64_t begin, std::int64_t end) {
    prepare();
    for (auto lane = static_cast<int>(begin); lane < end; ++lane)
      for (std::int64_t u = ranges.next(lane); u >= 0; u = ranges.next(lane)) {
        const std::int64_t r0 = u / channel_units * kRows, c = u % channel_units;
        const std::int64_t o0 = c * kChannels, o1 = std::min(out, o0 + kChannels);
        const bool ahead = c + 1 < channel_units && ranges.next_own(lane, u + 1);
        unit(r0, std::min(kRows, R - r0), o0, o1, ahead ? std::min(out, o1 + kChannels) : o1);
      }
  });
}

// x times weights in panels (float32, bf16 or int8 codes with their scales), on the pool.
Tensor panel_product(const Tensor& x, const WeightPanels& w, const float* scale, const Tensor& bias) {
  const std::int64_t R = x.size(0), out = w.out(), in = w.in();
  Tensor y = Tensor::empty({R, out});
  const float* xp = x.data<float>();
  const float* bp = bias.defined() ? bias.data<float>() : nullptr;
  float* yp = y.data<float>();
  const bool small = R * in * out < (std::int64_t{1} << 16);
  run_product_units(R, out, small, [] {}, [&](std::int64_t r0, std::int64_t rows, std::int64_t o0, std::int64_t o1,
                                       std::int64_t ahead_end) {
    w.product(xp + r0 * in, rows, in, scale, bp, yp + r0 * out, out, o0, o1, ahead_end);
  });
  return y;
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
  // The rows' codes (each row padded to in4 with zeros), in a buffer this thread keeps.
  thread_local std::vector<std::int8_t> codes;
  if (codes.size() < static_cast<std::size_t>(R * in4)) codes.resize(static_cast<std::size_t>(R * in4));
  std::int8_t* qx = codes.data();
  // Quantized by the threads that then multiply, in the same hand-over to the pool (chunks
  // of rows, about 8 a thread).
  SharedChunks quantized(R, R / (8 * std::max(1, get_active_threads())));
  const auto quantize = [&] {
    const auto rows = [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) {
        const QuantizedRow q = quantize_int8_row(xp + r * in, in, qx + r * in4);
        std::fill(qx + r * in4 + in, qx + (r + 1) * in4, std::int8_t{0});
        row_scale[static_cast<std::size_t>(r)] = q.scale;
        row_sum[static_cast<std::size_t>(r)] = q.sum;
      }
    };
    quantized.take_part([&](std::int64_t begin, std::int64_t end) { dispatched(rows, begin, end); });
  };
  Tensor y = Tensor::empty({R, out});  // every element written by the products below
  const float* bp = bias.defined() ? bias.data<float>() : nullptr;
  float* yp = y.data<float>();
  run_product_units(R, out, false, quantize, [&](std::int64_t r0, std::int64_t rows, std::int64_t o0, std::int64_t o1,
                                                 std::int64_t ahead_end) {
    w.product(qx + r0 * in4, rows, in4, row_sum.data() + r0, row_scale.data() + r0, scale.data(), bp,
              yp + r0 * out, out, o0, o1, width, ahead_end);
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

PackedLinear::PackedLinear(const Tensor& weight, const Tensor& bias, WeightFormat format)
    : format_(format), out_(weight.size(0)), in_(weight.size(1)), bias_(bias) {
  const Tensor w = weight.contiguous();
  const float* p = w.data<float>();
  switch (format) {
    case WeightFormat::kF32: panels_ = WeightPanels(p, out_, in_); break;
    case WeightFormat::kBf16: {
      std::vector<std::uint16_t> bf16(static_cast<std::size_t>(out_ * in_));
      for (std::size_t i = 0; i < bf16.size(); ++i) bf16[i] = to_bf16(p[i]);
      panels_ = WeightPanels(bf16.data(), out_, in_);
      break;
    }
    case WeightFormat::kInt8: {
      std::vector<std::int8_t> q(static_cast<std::size_t>(out_ * in_));
      scale_.resize(static_cast<std::size_t>(out_));
      for (std::int64_t o = 0; o < out_; ++o) {
        float top = 0;
        for (std::int64_t i = 0; i < in_; ++i) top = std::max(top, std::abs(p[o * in_ + i]));
        const float s = top > 0 ? top / 127.0f : 1.0f;
        scale_[static_cast<std::size_t>(o)] = s;
        for (std::int64_t i = 0; i < in_; ++i)
          q[static_cast<std::size_t>(o * in_ + i)] =
              static_cast<std::int8_t>(std::clamp(std::nearbyint(p[o * in_ + i] / s), -127.0f, 127.0f));
      }
      vnni_ = in_ > 0 && in_ <= Int8Panels::kMostInputs ? vnni_width() : 0;
      if (vnni_ != 0) vnni_panels_ = Int8Panels(q.data(), out_, in_);
      else panels_ = WeightPanels(q.data(), out_, in_);
      break;
    }
  }
}

Tensor PackedLinear::forward(const Tensor& x) const {
  WEFT_CHECK(x.dim() == 2 && x.size(1) == in_, "PackedLinear: input must be [R, in]");
  const Tensor xc = x.contiguous();
  if (vnni_ != 0) return int8_product(xc, vnni_panels_, vnni_, scale_, bias_);
  return panel_product(xc, panels_, format_ == WeightFormat::kInt8 ? scale_.data() : nullptr, bias_);
}

void PackedLinear::row(std::int64_t o, float* out) const {
  const float s = format_ == WeightFormat::kInt8 ? scale_[static_cast<std::size_t>(o)] : 1.0f;
  for (std::int64_t i = 0; i < in_; ++i) {
    const float w = vnni_ != 0 ? static_cast<float>(vnni_panels_.at(o, i)) : panels_.at(o, i);
    out[i] = format_ == WeightFormat::kInt8 ? s * w : w;
  }
}

std::int64_t PackedLinear::bytes() const {
  if (vnni_ != 0) return vnni_panels_.bytes() + out_ * 4;
  return panels_.bytes() + (format_ == WeightFormat::kInt8 ? out_ * 4 : 0);
}

}  // namespace weft::serve
