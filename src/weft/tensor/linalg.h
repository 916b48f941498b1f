// Matrix products through OpenBLAS (cblas_sgemm / cblas_dgemm).
#pragma once

#include "weft/tensor/tensor.h"

namespace weft::ops {

// c = alpha * op(a) * op(b) + beta * c for 2-D tensors, op = transpose when the flag is set.
// a and b may be transposed views (either of their last two strides may be 1); c must be
// contiguous.
void gemm(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b, double beta,
          Tensor& c);

// [M, K] x [K, N] -> [M, N]; batched [B, M, K] x [B, K, N] or x [K, N] -> [B, M, N].
Tensor matmul(const Tensor& a, const Tensor& b);

// x [N, in] times w [out, in] transposed, plus bias [out] when given: [N, out].
Tensor linear(const Tensor& x, const Tensor& w, const Tensor* bias);

}  // namespace weft::ops
