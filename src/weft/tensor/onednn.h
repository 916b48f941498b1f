// oneDNN's kernels over plain row-major buffers: matrix products in float32 and in
// bfloat16 (fp32 accumulation, for processors with AVX512-BF16), and 2-D convolutions
// (forward, backward data, backward weights) in NCHW. Each call runs single-threaded on
// the calling thread (weft splits work on its own pool, so a result depends only on the
// shape, never on the thread count); the primitives are built once per shape and kept.
//
// The processor's instruction sets are read once; WEFT_CPU_ISA (sse41, avx2, avx512_core,
// avx512_core_vnni, avx512_core_bf16: util/cpu.h) caps what oneDNN may use, so that a
// processor without the bf16 or VNNI instructions can be simulated on one that has them.
#pragma once

#include <compare>
#include <cstdint>
#include <string>

namespace weft::onednn {

// What the processor offers, under the WEFT_CPU_ISA cap.
bool has_bf16_instructions();   // AVX512-BF16: bf16 products at twice the fp32 rate
bool has_int8_instructions();   // AVX512-VNNI or AVX-VNNI (int8 products: serve/int8_panels.h)
std::string isa_name();         // oneDNN's name for the instruction set in use

// c[m, n] = a[m, k] b[k, n] (+ c when accumulate). An operand's element (i, j) is at
// p[i * row_stride + j * col_stride]: a transposed operand is a stride swap.
struct Operand {
  const void* p;
  std::int64_t row_stride, col_stride;
};
void matmul_f32(std::int64_t m, std::int64_t n, std::int64_t k, Operand a, Operand b, float* c,
                std::int64_t ldc, bool accumulate);
// The same with bfloat16 operands (bits, as util/half_float.h) and a float32 result.
void matmul_bf16(std::int64_t m, std::int64_t n, std::int64_t k, Operand a, Operand b, float* c,
                 std::int64_t ldc, bool accumulate);

// A convolution's shape: input [n, c, h, w], weights [o, c, kh, kw], output [n, o, oh, ow].
// bf16: the float32 operands are rounded to bfloat16 and multiplied with bf16 instructions
// (float32 sums and results), as bf16 products are.
struct ConvShape {
  std::int64_t n, c, h, w, o, kh, kw, stride, pad, oh, ow;
  bool bf16 = false;
  auto operator<=>(const ConvShape&) const = default;
};
// y = conv(x, w) + bias (bias may be null).
void conv_forward(const ConvShape& s, const float* x, const float* w, const float* bias, float* y);
// dw and db, the weights' and the bias's gradients for this input and dy, and, when dx is
// not null, dx = the convolution's adjoint applied to dy (dy reordered once for both).
void conv_backward(const ConvShape& s, const float* x, const float* dy, const float* w, float* dx, float* dw,
                   float* db);

}  // namespace weft::onednn
