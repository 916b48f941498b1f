// libxsmm's JIT-generated kernels for the products of attention heads and of layers: float32
// products, and bfloat16 products on AVX512-BF16 with float32 sums. In row-major terms every
// call computes c[m, n] = op(a)[m, k] b[k, n] (+ c when accumulate), single-threaded on the
// calling thread (weft splits the work on its own pool), in slices of k fixed by the shape:
// the result depends only on the operands and the shape.
//
// libxsmm multiplies column-major matrices and, in the version Debian ships (1.17), takes
// neither a transposed b nor, for bf16, a transposed a: b arrives row-major (float32) or
// packed in pairs of rows (bf16, pack_bf16_pairs), which the caller does once per product
// and shares between its blocks.
#pragma once

#include <cstdint>

namespace weft::xsmm {

// Whether libxsmm generates kernels for this processor: float32 products (AVX-512 or AVX2),
// bf16 products (AVX512-BF16, under WEFT_CPU_ISA's cap as oneDNN reads it).
bool has_f32_kernels();
bool has_bf16_kernels();

// a: [m, k] row-major with leading dimension lda, or, when a_transposed, stored as [k, m]
// (op(a) = a^T) with leading dimension lda. b: [k, n] row-major, leading dimension ldb.
void matmul_f32(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda, bool a_transposed,
                const float* b, std::int64_t ldb, float* c, std::int64_t ldc, bool accumulate);

// bf16 (bits, as util/half_float.h): a [m, k] row-major (lda); b as pack_bf16_pairs wrote it
// for n_packed columns, read from column `col` on (a column block of a packed matrix); k even.
void matmul_bf16(std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* a, std::int64_t lda,
                 const std::uint16_t* b_pairs, std::int64_t n_packed, std::int64_t col, float* c, std::int64_t ldc,
                 bool accumulate);

// b[k, n] (element (i, j) at b[i * row_stride + j * col_stride]) into out[k / 2][n][2]: rows
// 2i and 2i + 1 interleaved, the layout of the bf16 dot-product instructions. k even.
void pack_bf16_pairs(std::int64_t k, std::int64_t n, const std::uint16_t* b, std::int64_t row_stride,
                     std::int64_t col_stride, std::uint16_t* out);

// out[cols, rows] = in[rows, cols]^T (in's leading dimension ld), for 4-byte and 2-byte
// elements: a transposed operand made row-major.
void transpose_32(std::int64_t rows, std::int64_t cols, const void* in, std::int64_t ld, void* out);
void transpose_16(std::int64_t rows, std::int64_t cols, const void* in, std::int64_t ld, void* out);

}  // namespace weft::xsmm
