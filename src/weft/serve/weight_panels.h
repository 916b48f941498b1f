// Weights in panels of 16 output channels, multiplied so that a row's outputs do not depend
// on the rows multiplied with it (serving's float32 and bf16 weights, and int8 weights where
// the processor has no VNNI; seed 003 chapter 8).
//
// The weights w [out, in] are stored once, at load, in their format (float32, bf16 bits or
// int8 codes) as panels: panel p holds, for every input i, channels 16p..16p+15 side by side
// ([out/16 rounded up][in][16], zeros past `out`). A product reads each panel as it lies,
// for one row (a decoding step of one stream, bound by reading the weights) as for thousands
// (a prompt's prefill), so one copy of the weights serves every product.
//
// Every output is one chain of fused multiply-adds over the inputs in order,
//   acc = 0; for i in [0, in): acc = fma(x[r][i], widen(w[o][i]), acc)
// then acc * scale[o] (when given) + bias[o] (when given). A fused multiply-add is rounded
// once whatever the vector width, so the result is the same bits on the AVX-512, AVX2 and
// scalar paths, for any number of rows, any row's place among them, any column block and any
// thread count: a request's tokens and logprobs do not depend on what else a server batches
// with it (tests/serve/test_serve.cpp, tests/serve/batch_invariance.sh).
#pragma once

#include <cstdint>
#include <memory>

namespace weft::serve {

class WeightPanels {
 public:
  enum class Element : std::uint8_t { kF32, kBf16, kInt8 };
  static constexpr std::int64_t kChannels = 16;  // output channels per panel

  WeightPanels() = default;
  // w [out, in], row-major: float32, bf16 bits (std::uint16_t) or int8 codes.
  WeightPanels(const float* w, std::int64_t out, std::int64_t in);
  WeightPanels(const std::uint16_t* w, std::int64_t out, std::int64_t in);
  WeightPanels(const std::int8_t* w, std::int64_t out, std::int64_t in);

  std::int64_t out() const { return out_; }
  std::int64_t in() const { return in_; }
  Element element() const { return element_; }
  float at(std::int64_t o, std::int64_t i) const;  // w[o][i], widened to float32
  // The panels' bytes as stored (the padding channels of the last panel included).
  std::int64_t bytes() const { return bytes_; }

  // y[r][o] for rows r < rows and channels o in [o_begin, o_end) (o_begin a multiple of 16),
  // as the contract above: x rows `ldx` floats apart, y rows `ldy` floats apart; scale and
  // bias (per channel, indexed from 0) may be null. Channels from o_end to `ahead_end`, when
  // it is past o_end, are the ones the caller computes next: the last pass fetches their
  // first panels into L2 (panel_fetch.h).
  void product(const float* x, std::int64_t rows, std::int64_t ldx, const float* scale, const float* bias, float* y,
               std::int64_t ldy, std::int64_t o_begin, std::int64_t o_end, std::int64_t ahead_end = 0) const;

  // The path products take on this processor, under WEFT_CPU_ISA's cap as it was at the
  // first call: "avx512", "avx2" or "scalar"; and whether this processor runs a path (tests
  // compare them).
  static const char* path();
  static bool runs(const char* path);
  // product on a given path (one that runs here).
  void product_on(const char* path, const float* x, std::int64_t rows, std::int64_t ldx, const float* scale,
                  const float* bias, float* y, std::int64_t ldy, std::int64_t o_begin, std::int64_t o_end) const;

 private:
  template <class W>
  void store(const W* w, std::int64_t out, std::int64_t in, Element element);
  void product_at(int path, const float* x, std::int64_t rows, std::int64_t ldx, const float* scale, const float* bias,
                  float* y, std::int64_t ldy, std::int64_t o_begin, std::int64_t o_end, std::int64_t ahead_end) const;

  std::int64_t out_ = 0, in_ = 0;
  Element element_ = Element::kF32;
  std::int64_t bytes_ = 0;
  std::shared_ptr<std::uint8_t> data_;  // the panels, in the element's type (immutable: copies share them)
};

// The same product over float32 panels the caller lays out (attention's: a head's keys and
// values copied from the key-value cache): panel p (channels 16p..16p+15) at panels + p *
// panel_stride, holding [in][16] floats from there (inputs past `in` unread), into
// y[r][o - o_begin]. With `resume`, each output's chain goes on from the value y holds
// instead of from 0: a product cut over its inputs, part by part in order, gives the bits of
// one pass over all of them. `path` as product_on (null: the processor's).
void float_panel_product(const float* panels, std::int64_t panel_stride, std::int64_t in, const float* x,
                         std::int64_t rows, std::int64_t ldx, float* y, std::int64_t ldy, std::int64_t o_begin,
                         std::int64_t o_end, bool resume, const char* path = nullptr);

}  // namespace weft::serve
