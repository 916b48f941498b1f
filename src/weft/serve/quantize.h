// Weights in fewer bits for inference (seed 003 chapter 8's "fewer bits"): int8 with one
// symmetric scale per output channel (w[o][i] ~ scale[o] * q[o][i], q in [-127, 127]), or
// bf16 (float32 rounded to nearest even in its upper 16 bits). A PackedLinear keeps only the
// small weights; its product reads them, widens them to float32 in registers and
// accumulates in float32 (dequantization on the fly), so activations stay float32 — except
// int8 weights on a processor with VNNI (the kernel table's int8 choice when the layer is
// built): there the weights are kept in VNNI panels (serve/int8_panels.h), the activations
// are quantized too, one symmetric scale per row (dynamic per-token quantization), and the
// product runs in int8 with exact int32 sums, for any number of rows. float32 weights that
// no row lookup reads (a block's products, an untied head) are kept a second time as
// oneDNN's packed panels (tensor/onednn.h's PackedWeightsF32), in the column blocks the
// pool shares out, for products of several rows (a step of several streams); one row reads
// the rows. (The decoder asks for it where the copy fits in memory: serve/decoder.cpp.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/serve/int8_panels.h"
#include "weft/tensor/onednn.h"
#include "weft/tensor/tensor.h"

namespace weft::serve {

enum class WeightFormat { kF32, kBf16, kInt8 };
WeightFormat parse_weight_format(const std::string& name);  // fp32 | bf16 | int8; ConfigError otherwise
const char* weight_format_name(WeightFormat f);

class PackedLinear {
 public:
  PackedLinear() = default;
  // weight [out, in]; bias [out] or undefined. `row_lookups`: whether row() will be asked
  // (a tied token table); without, float32 weights are also kept packed for products.
  PackedLinear(const Tensor& weight, const Tensor& bias, WeightFormat format, bool row_lookups = true);
  // x [R, in] -> [R, out] (+ bias).
  Tensor forward(const Tensor& x) const;
  // Row o of the weight as float32 (an embedding lookup of a tied, packed table).
  void row(std::int64_t o, float* out) const;
  std::int64_t bytes() const;  // of the weights in the format (scales and padding included), not the bias
  std::int64_t packed_copy_bytes() const;  // of float32 weights' packed copy (0 without one)
  std::int64_t out_features() const { return out_; }

 private:
  WeightFormat format_ = WeightFormat::kF32;
  std::int64_t out_ = 0, in_ = 0;
  Tensor f32_, bias_;
  std::vector<onednn::PackedWeightsF32> f32_blocks_;  // float32 without row lookups: column blocks (the last may be narrower)
  std::vector<std::uint16_t> bf16_;
  std::vector<std::int8_t> int8_;  // row-major, without a VNNI kernel
  Int8Panels panels_;              // with one: vnni_ is its width
  int vnni_ = 0;
  std::vector<float> scale_;
};

}  // namespace weft::serve
