#include "weft/tensor/linalg.h"

#include <vector>

#include "weft/tensor/blas.h"
#include "weft/tensor/kernel_table.h"
#include "weft/tensor/onednn.h"
#include "weft/tensor/ops.h"
#include "weft/tensor/profile.h"
#include "weft/tensor/thread_pool.h"
#include "weft/tensor/xsmm.h"
#include "weft/util/half_float.h"

namespace weft::ops {

namespace {

// A 2-D operand as BLAS sees it: row-major data, whether it is stored transposed, and its
// leading dimension. Copies when neither of the last two strides is 1.
struct BlasOperand {
  Tensor t;
  bool transposed;
  std::int64_t ld;
};

BlasOperand as_blas(const Tensor& x) {
  WEFT_CHECK(x.dim() == 2, "gemm operand must be 2-D, got " + shape_to_string(x.shape()));
  std::int64_t rows = x.size(0), cols = x.size(1);
  if (x.stride(1) == 1 && x.stride(0) >= std::max<std::int64_t>(cols, 1)) return {x, false, x.stride(0)};
  if (x.stride(0) == 1 && x.stride(1) >= std::max<std::int64_t>(rows, 1)) return {x, true, x.stride(1)};
  Tensor c = x.clone();
  return {c, false, std::max<std::int64_t>(cols, 1)};
}

thread_local bool t_bf16_products = false;

}  // namespace

void set_bf16_products(bool on) { t_bf16_products = on; }
bool bf16_products() { return t_bf16_products; }
bool bf16_instructions_for(std::int64_t m, std::int64_t n, std::int64_t k) {
  return t_bf16_products && kernels::bf16_native(m, n, k);
}

GemmBlocks gemm_blocks(std::int64_t m, std::int64_t n) {
  constexpr std::int64_t kMinRows = 64, kMinCols = 128, kMaxBlocks = 8;
  if (m >= 2 * kMinRows) {
    const std::int64_t count = std::min(kMaxBlocks, m / kMinRows);
    const std::int64_t size = ((m + count - 1) / count + 15) / 16 * 16;
    return {true, size, (m + size - 1) / size};
  }
  if (n >= 2 * kMinCols) {
    const std::int64_t count = std::min(kMaxBlocks, n / kMinCols);
    const std::int64_t size = ((n + count - 1) / count + 15) / 16 * 16;
    return {false, size, (n + size - 1) / size};
  }
  return {true, std::max<std::int64_t>(m, 1), 1};
}

namespace {
// The sizes of op(a) [m, k] x op(b) [k, n] -> c [m, n], checked against each other and c's
// layout (2-D, contiguous rows).
struct ProductDims {
  std::int64_t m, n, k;
};
ProductDims product_dims(bool trans_a, bool trans_b, const Tensor& a, const Tensor& b, const Tensor& c) {
  WEFT_CHECK(c.dim() == 2 && c.stride(1) == 1 && c.stride(0) >= c.size(1),
             "gemm: output must be 2-D with contiguous rows");
  WEFT_CHECK(a.dim() == 2 && b.dim() == 2, "gemm operands must be 2-D, got " + shape_to_string(a.shape()) + " and " +
                                               shape_to_string(b.shape()));
  const ProductDims d{trans_a ? a.size(1) : a.size(0), trans_b ? b.size(0) : b.size(1), trans_a ? a.size(0) : a.size(1)};
  const std::int64_t kb = trans_b ? b.size(1) : b.size(0);
  WEFT_CHECK(d.k == kb && c.size(0) == d.m && c.size(1) == d.n,
             "gemm: shapes " + shape_to_string(a.shape()) + (trans_a ? "^T" : "") + " x " +
                 shape_to_string(b.shape()) + (trans_b ? "^T" : "") + " -> " + shape_to_string(c.shape()));
  return d;
}

// A float32 operand rounded to bf16 in the orientation it is stored in (as as_blas reads it).
Tensor bf16_copy(const BlasOperand& x) { return x.transposed ? x.t.t().to(DType::BF16).t() : x.t.to(DType::BF16); }

// c = op(a) op(b) + beta c for bf16 operands and a float32 c (beta 0 or 1): on bf16
// instructions in the blocks gemm uses, each operand read where it lies; without the
// instructions, the float32 product of the widened operands (the same values).
void gemm_bf16_operands(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b, double beta,
                        Tensor& c) {
  WEFT_CHECK(a.dtype() == DType::BF16 && b.dtype() == DType::BF16 && c.dtype() == DType::F32 && alpha == 1.0 &&
                 (beta == 0.0 || beta == 1.0),
             "gemm: bf16 operands need each other, a float32 result, alpha 1 and beta 0 or 1");
  if (!kernels::bf16_native()) {
    gemm(trans_a, trans_b, 1.0, a.to(DType::F32), b.to(DType::F32), beta, c);
    return;
  }
  const ProductDims dims = product_dims(trans_a, trans_b, a, b, c);
  const std::int64_t m = dims.m, n = dims.n, k = dims.k;  // (named: lambdas below use them)
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (beta == 0) c.zero_();
    return;
  }
  const BlasOperand A = as_blas(a), B = as_blas(b);
  const bool a_t = trans_a != A.transposed, b_t = trans_b != B.transposed;
  const auto* pa = reinterpret_cast<const std::uint16_t*>(A.t.data<bf16>());
  const auto* pb = reinterpret_cast<const std::uint16_t*>(B.t.data<bf16>());
  float* pc = c.data<float>();
  const std::int64_t ldc = c.stride(0);
  const GemmBlocks blocks = gemm_blocks(m, n);
  const bool xsmm = kernels::gemm_bf16(m, n, k, a_t) == kernels::Gemm::Xsmm;
  // libxsmm reads b in pairs of rows, packed once for every block.
  const Tensor pairs = xsmm ? Tensor::empty({k * n}, DType::BF16) : Tensor();
  auto* pp = xsmm ? reinterpret_cast<std::uint16_t*>(pairs.data<bf16>()) : nullptr;
  if (xsmm) xsmm::pack_bf16_pairs(k, n, pb, b_t ? 1 : B.ld, b_t ? B.ld : 1, pp);
  parallel_for(blocks.count, 1, [&](std::int64_t first, std::int64_t last) {
    std::vector<std::uint16_t> rows_of_a;  // a block of op(a) made row-major (a stored transposed)
    for (std::int64_t i = first; i < last; ++i) {
      const std::int64_t r0 = blocks.by_rows ? i * blocks.size : 0, r1 = blocks.by_rows ? std::min(m, r0 + blocks.size) : m;
      const std::int64_t c0 = blocks.by_rows ? 0 : i * blocks.size, c1 = blocks.by_rows ? n : std::min(n, c0 + blocks.size);
      if (r0 >= r1 || c0 >= c1) continue;
      if (xsmm) {
        const std::uint16_t* ra = pa + r0 * A.ld;
        std::int64_t lda = A.ld;
        if (a_t) {
          rows_of_a.resize(static_cast<std::size_t>((r1 - r0) * k));
          xsmm::transpose_16(k, r1 - r0, pa + r0, A.ld, rows_of_a.data());
          ra = rows_of_a.data();
          lda = k;
        }
        xsmm::matmul_bf16(r1 - r0, c1 - c0, k, ra, lda, pp, n, c0, pc + r0 * ldc + c0, ldc, beta == 1.0);
        continue;
      }
      // Element (i, j) of op(A) at i * row_stride + j * col_stride.
      const onednn::Operand oa{pa + (a_t ? r0 : r0 * A.ld), a_t ? 1 : A.ld, a_t ? A.ld : 1};
      const onednn::Operand ob{pb + (b_t ? c0 * B.ld : c0), b_t ? 1 : B.ld, b_t ? B.ld : 1};
      onednn::matmul_bf16(r1 - r0, c1 - c0, k, oa, ob, pc + r0 * ldc + c0, ldc, beta == 1.0);
    }
  });
}
}  // namespace

void gemm(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b, double beta,
          Tensor& c) {
  ProfileScope profile(Work::Gemm);
  if (a.dtype() == DType::BF16 || b.dtype() == DType::BF16) return gemm_bf16_operands(trans_a, trans_b, alpha, a, b, beta, c);
  WEFT_CHECK(a.dtype() == b.dtype() && a.dtype() == c.dtype(), "gemm: dtype mismatch");
  const ProductDims dims = product_dims(trans_a, trans_b, a, b, c);
  const std::int64_t m = dims.m, n = dims.n, k = dims.k;  // (named: lambdas below use them)
  BlasOperand A = as_blas(a), B = as_blas(b);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (beta == 0) c.zero_(); else mul_(c, beta);
    return;
  }
  const bool a_t = trans_a != A.transposed, b_t = trans_b != B.transposed;
  const std::int64_t ldc = c.stride(0);
  if (c.dtype() == DType::F32) {
    // Blocks of C, one single-threaded library call each, run on the pool. The blocks
    // depend only on the shape, so every element is computed the same way whatever the
    // thread count (OpenBLAS's own threading changes the last bits of some products with
    // it), and a thread on a busy core takes fewer blocks. The library per block comes from
    // the kernel table.
    const GemmBlocks blocks = gemm_blocks(m, n);
    const float* pa = A.t.data<float>();
    const float* pb = B.t.data<float>();
    float* pc = c.data<float>();
    // oneDNN's products take alpha 1 and beta 0 or 1 (a sum post-op).
    const bool onednn_ok = alpha == 1.0 && (beta == 0.0 || beta == 1.0);
    // bf16 products: both operands rounded once into dense bf16 copies.
    if (onednn_ok && bf16_instructions_for(m, n, k))
      return gemm_bf16_operands(trans_a, trans_b, alpha, bf16_copy(A), bf16_copy(B), beta, c);
    // The library, from the kernel table for the shape of a block.
    const kernels::Gemm lib =
        onednn_ok ? kernels::gemm_f32(blocks.by_rows ? std::min(m, blocks.size) : m,
                                      blocks.by_rows ? n : std::min(n, blocks.size), k)
                  : kernels::Gemm::OpenBlas;
    // libxsmm reads b row-major: a transposed b is copied so once for every block.
    Tensor b_rows;
    const float* xb = pb;
    std::int64_t xldb = B.ld;
    if (lib == kernels::Gemm::Xsmm && b_t) {
      b_rows = Tensor::empty({k, n}, DType::F32);
      xsmm::transpose_32(n, k, pb, B.ld, b_rows.data<float>());
      xb = b_rows.data<float>();
      xldb = n;
    }
    parallel_for(blocks.count, 1, [&](std::int64_t first, std::int64_t last) {
      for (std::int64_t i = first; i < last; ++i) {
        const std::int64_t r0 = blocks.by_rows ? i * blocks.size : 0, r1 = blocks.by_rows ? std::min(m, r0 + blocks.size) : m;
        const std::int64_t c0 = blocks.by_rows ? 0 : i * blocks.size, c1 = blocks.by_rows ? n : std::min(n, c0 + blocks.size);
        if (r0 >= r1 || c0 >= c1) continue;
        float* out = pc + r0 * ldc + c0;
        const float* sa = pa + (a_t ? r0 : r0 * A.ld);
        const float* sb = pb + (b_t ? c0 * B.ld : c0);
        if (lib == kernels::Gemm::Xsmm) {
          xsmm::matmul_f32(r1 - r0, c1 - c0, k, sa, A.ld, a_t, xb + c0, xldb, out, ldc, beta == 1.0);
          continue;
        }
        if (lib == kernels::Gemm::OneDnn) {
          const onednn::Operand oa{sa, a_t ? 1 : A.ld, a_t ? A.ld : 1};
          const onednn::Operand ob{sb, b_t ? 1 : B.ld, b_t ? B.ld : 1};
          onednn::matmul_f32(r1 - r0, c1 - c0, k, oa, ob, out, ldc, beta == 1.0);
          continue;
        }
        blas::sgemm(a_t, b_t, r1 - r0, c1 - c0, k, static_cast<float>(alpha), sa, A.ld, sb, B.ld,
                    static_cast<float>(beta), out, ldc);
      }
    });
  } else {
    blas::dgemm(a_t, b_t, m, n, k, alpha, A.t.data<double>(), A.ld, B.t.data<double>(), B.ld, beta,
                c.data<double>(), ldc);
  }
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (a.dim() == 2 && b.dim() == 2) {
    Tensor c = Tensor::empty({a.size(0), b.size(1)}, a.dtype());
    gemm(false, false, 1.0, a, b, 0.0, c);
    return c;
  }
  WEFT_CHECK(a.dim() == 3 && (b.dim() == 2 || (b.dim() == 3 && b.size(0) == a.size(0))),
             "matmul: unsupported shapes " + shape_to_string(a.shape()) + " x " + shape_to_string(b.shape()));
  if (b.dim() == 2 && a.is_contiguous()) {
    // One GEMM over all rows of the batch.
    Tensor flat = matmul(a.reshape({a.size(0) * a.size(1), a.size(2)}), b);
    return flat.view({a.size(0), a.size(1), b.size(1)});
  }
  // A batch of products (attention's heads): one product per task, each on one thread.
  ProfileScope profile(Work::Gemm);
  std::int64_t batch = a.size(0);
  Tensor c = Tensor::empty({batch, a.size(1), b.size(-1)}, a.dtype());
  const bool bf16 = t_bf16_products;  // the caller's, for every thread that takes a product
  parallel_for(batch, 1, [&](std::int64_t first, std::int64_t last) {
    const bool own = t_bf16_products;
    t_bf16_products = bf16;
    for (std::int64_t i = first; i < last; ++i) {
      Tensor ci = c.select(0, i);
      gemm(false, false, 1.0, a.select(0, i), b.dim() == 3 ? b.select(0, i) : b, 0.0, ci);
    }
    t_bf16_products = own;
  });
  return c;
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor* bias) {
  WEFT_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1),
             "linear: input " + shape_to_string(x.shape()) + " does not match weight " +
                 shape_to_string(w.shape()));
  Tensor y = Tensor::empty({x.size(0), w.size(0)}, x.dtype() == DType::BF16 ? DType::F32 : x.dtype());
  double beta = 0.0;
  if (bias != nullptr) {
    WEFT_CHECK(bias->dim() == 1 && bias->size(0) == w.size(0), "linear: bias shape");
    y.copy_(*bias);  // broadcast the bias into every row, then accumulate
    beta = 1.0;
  }
  gemm(false, true, 1.0, x, w, beta, y);
  return y;
}

}  // namespace weft::ops
