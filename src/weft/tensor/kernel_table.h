// Which library computes each kind of kernel, per shape and precision: the kernel table.
//
// The choices come from measurement on this project's reference machine (bench/kernels,
// single-threaded calls as weft makes them; figures in docs/performance.md):
//   float32 products: oneDNN's matmul when k >= 128 and n >= 128 (2.0x OpenBLAS on the GPT's
//     layers, 1.6x on the MLP's first; libxsmm within 3% on the GPT's, slower on the MLP's,
//     where it copies the transposed weights first), libxsmm's JIT kernels below
//     (attention's heads, 64 at once: 1.5-1.8x oneDNN, 1.9-2.3x OpenBLAS), OpenBLAS there on
//     processors libxsmm has no kernels for;
//   bfloat16 products: on processors with AVX512-BF16, libxsmm below 2^22 multiply-adds with
//     an even k (b packed in pairs of rows; a transposed a copied, so not past k = 512), where
//     oneDNN's small products are slow (heads: 1.4-1.5x oneDNN's bf16), oneDNN's matmul
//     above (within 5% of libxsmm, no packing; 1.4-1.6x the float32 rate on the GPT's
//     layers); without the instructions, float32 products of bf16-rounded operands;
//   bf16 convolutions (under bf16 products, where a product of the convolution's shape would
//     run on bf16 instructions by the rule above): oneDNN's bf16 kernels, the
//     operands reordered to bf16 (the CNN with --precision bf16: 5,763 samples/s against
//     4,908 with fp32 convolutions of rounded operands);
//   convolutions: oneDNN's direct convolution (blocked channels) forward and for the
//     weights' gradient (1.3-2.7x im2col + OpenBLAS); the input's gradient on oneDNN when the
//     input has at least 8 channels, else col2im of an OpenBLAS product (oneDNN's kernel for
//     one input channel runs at under a tenth of the GEMM's rate).
//   int8 products (serving's --quantize int8): weft's VNNI kernel (serve/int8_panels.h) on
//     dynamically quantized activations where the processor has AVX512-VNNI or AVX-VNNI,
//     else float32 products of the widened weights.
// WEFT_KERNELS overrides them, e.g. "gemm=openblas,conv=im2col,bf16=emulated":
//   gemm=auto|openblas|onednn|libxsmm, conv=auto|im2col|onednn, bf16=auto|native|emulated,
//   int8=auto|native|emulated
// (gemm picks the float32 library; for bf16 products gemm=libxsmm forces libxsmm wherever k is
// even and any other choice forces oneDNN; bf16 native needs AVX512-BF16, int8 native VNNI;
// int8 takes effect when a layer is packed, at load).
// A malformed value is a ConfigError naming it.
#pragma once

#include <cstdint>
#include <string>

namespace weft::kernels {

enum class Gemm { OpenBlas, OneDnn, Xsmm };
enum class Conv { Im2col, OneDnn };

// The library for one float32 product [m, k] x [k, n].
Gemm gemm_f32(std::int64_t m, std::int64_t n, std::int64_t k);
// The library for one bf16 product (operands rounded to bfloat16, float32 sums): libxsmm or
// oneDNN.
Gemm gemm_bf16(std::int64_t m, std::int64_t n, std::int64_t k, bool a_transposed);
// Whether bf16 products run as bf16 instructions (else fp32 products of rounded operands):
// bf16_native() for the processor and WEFT_KERNELS, the second for one product's shape.
bool bf16_native();
bool bf16_native(std::int64_t m, std::int64_t n, std::int64_t k);
// Whether int8 weights multiply int8 activations (else they are widened to float32).
bool int8_native();
// Convolution forward and weights' gradient; input's gradient for `in_channels` channels.
Conv conv_forward();
Conv conv_backward_data(std::int64_t in_channels);

// One line for run summaries: the libraries' instruction set, the level of weft's own loops
// (util/cpu.h) and each kernel class's library.
std::string summary();

// Re-reads WEFT_KERNELS (tests change it between cases).
void reload();

}  // namespace weft::kernels
