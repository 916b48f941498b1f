// Matrix products through OpenBLAS (cblas_sgemm / cblas_dgemm) and oneDNN (matmul, float32
// and bfloat16), as the kernel table chooses per shape (kernel_table.h). float32 products
// are split into blocks of the output that depend only on the shape (gemm_blocks), each one
// single-threaded library call, run on weft's thread pool: results do not depend on the
// thread count, and the pool's threads share the work as they come free.
#pragma once

#include "weft/tensor/tensor.h"

namespace weft::ops {

// How an [m, n] product is split: row blocks of `size` rows (by_rows) or column blocks of
// `size` columns, `count` of them; at least 64 rows or 128 columns each, at most 8.
struct GemmBlocks {
  bool by_rows;
  std::int64_t size, count;
};
GemmBlocks gemm_blocks(std::int64_t m, std::int64_t n);

// c = alpha * op(a) * op(b) + beta * c for 2-D tensors, op = transpose when the flag is set.
// a and b may be transposed views (either of their last two strides may be 1); c's rows
// must be contiguous (a column range of a wider matrix is fine). bf16 operands (both a and
// b, a float32 c, alpha 1, beta 0 or 1) run on bf16 instructions as they are, or as the
// float32 product of their values where the processor has none.
void gemm(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b, double beta,
          Tensor& c);

// While on (for the calling thread), float32 products round both operands to bfloat16 and
// multiply them with bf16 instructions, accumulating in float32, where the kernel table
// says the processor has them (kernel_table.h); elsewhere they stay float32 products.
void set_bf16_products(bool on);
bool bf16_products();
// Whether this thread's product [m, k] x [k, n] runs on bf16 instructions: bf16 products on
// and the kernel table's rule for the shape. The product then rounds its operands itself.
bool bf16_instructions_for(std::int64_t m, std::int64_t n, std::int64_t k);

// [M, K] x [K, N] -> [M, N]; batched [B, M, K] x [B, K, N] or x [K, N] -> [B, M, N].
Tensor matmul(const Tensor& a, const Tensor& b);

// x [N, in] times w [out, in] transposed, plus bias [out] when given: [N, out] (float32 for
// bf16 operands).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor* bias);

}  // namespace weft::ops
