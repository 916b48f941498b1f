// Weights in fewer bits for inference (seed 003 chapter 8's "fewer bits"): int8 with one
// symmetric scale per output channel (w[o][i] ~ scale[o] * q[o][i], q in [-127, 127]), or
// bf16 (float32 rounded to nearest even in its upper 16 bits). A PackedLinear keeps its
// weights once, in their format, as panels (serve/weight_panels.h) that every product reads
// as they lie, whatever its number of rows: the weights are widened to float32 in registers
// and each output is one chain of fused multiply-adds, so activations stay float32 and a
// row's outputs do not depend on the rows multiplied with it (nor on the vector width) —
// except int8 weights on a processor with VNNI (the kernel table's int8 choice when the
// layer is built): there the weights are kept in VNNI panels (serve/int8_panels.h), the
// activations are quantized too, one symmetric scale per row (dynamic per-token
// quantization), and the product runs in int8 with exact int32 sums, also the same for a row
// whatever the rows beside it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/serve/int8_panels.h"
#include "weft/serve/weight_panels.h"
#include "weft/tensor/tensor.h"

namespace weft::serve {

enum class WeightFormat { kF32, kBf16, kInt8 };
WeightFormat parse_weight_format(const std::string& name);  // fp32 | bf16 | int8; ConfigError otherwise
const char* weight_format_name(WeightFormat f);

class PackedLinear {
 public:
  PackedLinear() = default;
  // weight [out, in]; bias [out] or undefined.
  PackedLinear(const Tensor& weight, const Tensor& bias, WeightFormat format);
  // x [R, in] -> [R, out] (+ bias).
  Tensor forward(const Tensor& x) const;
  // Row o of the weight as float32 (an embedding lookup of a tied, packed table).
  void row(std::int64_t o, float* out) const;
  std::int64_t bytes() const;  // of the weights in the format (scales and padding included), not the bias
  std::int64_t out_features() const { return out_; }

 private:
  WeightFormat format_ = WeightFormat::kF32;
  std::int64_t out_ = 0, in_ = 0;
  Tensor bias_;
  WeightPanels panels_;  // float32, bf16, or int8 without a VNNI kernel
  Int8Panels vnni_panels_;  // int8 with one: vnni_ is its width
  int vnni_ = 0;
  std::vector<float> scale_;  // int8's, per output channel
};

}  // namespace weft::serve
