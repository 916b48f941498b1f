// Int8 weights in VNNI panels and their product with int8 activations (serving's --quantize
// int8 on processors with VNNI; seed 003 chapter 8's "fewer bits").
//
// The weights w [out, in] (int8, one scale per output channel, as serve/quantize.h makes
// them) are stored once, at load, as panels of 16 output channels: panel p holds, for every
// 4 inputs i..i+3, the 16 channels' 4 bytes side by side ([out/16][in/4][16][4], zeros past
// the inputs' end); the last out % 16 channels stay rows, multiplied by integer loops. One
// VNNI instruction then multiplies 4 activation bytes (broadcast) with a panel's 64 bytes and
// adds to the 16 channels' int32 sums; nothing is copied or reordered per call, so a decoding step reads each weight byte once (a product of oneDNN's, called
// with the row-major weights, reorders them on every call).
//
// VNNI multiplies unsigned bytes by signed ones: the panels hold the weights plus 128, the
// activations stay signed, and 128 times a row's sum of activations takes the 128s back out.
// The sums are exact integers, so a product's result does not depend on the instruction
// width, the thread count or the rows multiplied with it.
#pragma once

#include <cstdint>
#include <vector>

namespace weft::serve {

// The widest VNNI kernel this processor runs, under WEFT_CPU_ISA's cap (util/cpu.h) and
// WEFT_KERNELS' int8 choice (tensor/kernel_table.h): 512 (AVX512-VNNI), 256 (AVX-VNNI) or 0.
int vnni_width();
// Whether the processor runs the kernel of this width (512 or 256) under WEFT_CPU_ISA's cap
// (WEFT_KERNELS aside): a processor with AVX512-VNNI may lack AVX-VNNI.
bool vnni_runs(int width);

class Int8Panels {
 public:
  // The most inputs a product sums exactly in int32: (w + 128) x summed over them wraps
  // around, but 128 times the activations' sum, and the difference, stay within int32.
  static constexpr std::int64_t kMostInputs = std::int64_t{1} << 17;

  Int8Panels() = default;
  // w [out, in], row-major; in at most kMostInputs.
  Int8Panels(const std::int8_t* w, std::int64_t out, std::int64_t in);

  std::int64_t out() const { return out_; }
  std::int64_t in() const { return in_; }
  // The padded input length a row of activations must have (in rounded up to 4; the bytes
  // past `in` must be 0).
  std::int64_t padded_in() const { return in4_; }
  std::int8_t at(std::int64_t o, std::int64_t i) const;  // w[o][i]
  // The panels and the rows past the last panel, as stored.
  std::int64_t bytes() const { return static_cast<std::int64_t>(panels_.size() + tail_.size()); }

  // y[r][o] = float(sum_i x[r][i] w[o][i]) * scale[o] * x_scales[r] (+ bias[o] when bias is
  // not null) for rows r < rows and channels o in [o_begin, o_end) (o_begin a multiple of 16);
  // x rows `ldx` bytes apart (at least padded_in()), x_sums[r] = sum_i x[r][i]; y rows `ldy`
  // floats apart. `width` is one the processor runs (vnni_runs(width)). Channels from o_end
  // to `ahead_end`, when it is past o_end, are the ones the caller computes next: the last
  // pass fetches their first panels into L2 (panel_fetch.h).
  void product(const std::int8_t* x, std::int64_t rows, std::int64_t ldx, const std::int32_t* x_sums,
               const float* x_scales, const float* scale, const float* bias, float* y, std::int64_t ldy,
               std::int64_t o_begin, std::int64_t o_end, int width, std::int64_t ahead_end = 0) const;

 private:
  std::int64_t out_ = 0, in_ = 0, in4_ = 0, full_ = 0;  // full_: the channels in whole panels
  std::vector<std::uint8_t> panels_;  // the weights plus 128
  std::vector<std::int8_t> tail_;     // [out - full_, in]
};

}  // namespace weft::serve
