// Kernels against straightforward reference loops.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "weft/tensor/conv.h"
#include "weft/tensor/fast_math.h"
#include "weft/tensor/kernel_table.h"
#include "weft/tensor/linalg.h"
#include "weft/tensor/onednn.h"
#include "weft/tensor/ops.h"
#include "weft/tensor/rng.h"
#include "weft/tensor/thread_pool.h"
#include "weft/tensor/xsmm.h"
#include "weft/util/error.h"
#include "../scoped_kernels.h"

using namespace weft;
using weft::testing::for_each_bf16_mode;
using weft::testing::ScopedKernels;

namespace {
Tensor naive_matmul(const Tensor& a, const Tensor& b) {
  Tensor c = Tensor::zeros({a.size(0), b.size(1)}, DType::F64);
  for (int64_t i = 0; i < a.size(0); ++i)
    for (int64_t j = 0; j < b.size(1); ++j) {
      double s = 0;
      for (int64_t k = 0; k < a.size(1); ++k) s += a.at({i, k}) * b.at({k, j});
      c.set({i, j}, s);
    }
  return c;
}

Tensor naive_conv(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, int64_t pad) {
  int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), O = w.size(0), K = w.size(2);
  int64_t OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
  Tensor out = Tensor::zeros({N, O, OH, OW}, DType::F64);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double s = b.defined() ? b.at({o}) : 0.0;
          for (int64_t c = 0; c < C; ++c)
            for (int64_t i = 0; i < K; ++i)
              for (int64_t j = 0; j < K; ++j) {
                int64_t ih = oh * stride - pad + i, iw = ow * stride - pad + j;
                if (ih >= 0 && ih < H && iw >= 0 && iw < W) s += w.at({o, c, i, j}) * x.at({n, c, ih, iw});
              }
          out.set({n, o, oh, ow}, s);
        }
  return out;
}
// max |a - b| relative to max |b|.
double relative_error(const Tensor& a, const Tensor& b) {
  const Tensor b64 = b.to(DType::F64);
  return ops::max_abs_diff(a.to(DType::F64), b64) /
         std::max(1e-30, ops::max_abs_diff(b64, Tensor::zeros(b64.shape(), DType::F64)));
}
}  // namespace

// Each library the kernel table can pick agrees with float64 on the float32 products it
// serves: small and large shapes, transposed operands, several row and column blocks, and
// accumulation into the output (beta = 1: a linear layer's bias).
TEST(Linalg, EveryLibraryMatchesFloat64) {
  Rng r(11);
  for (const char* library : {"gemm=openblas", "gemm=onednn", "gemm=libxsmm", "gemm=auto"}) {
    // libxsmm's float32 kernels need AVX2: a processor without it (or WEFT_CPU_ISA=sse41)
    // refuses gemm=libxsmm.
    if (std::string(library) == "gemm=libxsmm" && !xsmm::has_f32_kernels()) {
      EXPECT_THROW(
          {
            ScopedKernels use(library);
            kernels::gemm_f32(64, 256, 784);
          },
          ConfigError);
      continue;
    }
    ScopedKernels use(library);
    for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{7, 5, 3}, {64, 784, 256}, {48, 784, 256}, {48, 256, 784},
                           {256, 48, 784}, {300, 128, 130}, {33, 200, 600}, {2, 1, 1}, {70, 1030, 9}}) {
      Tensor a = randn({m, k}, r, 0, 1), b = randn({k, n}, r, 0, 1), at = randn({k, m}, r, 0, 1),
             bt = randn({n, k}, r, 0, 1);
      EXPECT_LT(relative_error(ops::matmul(a, b), ops::matmul(a.to(DType::F64), b.to(DType::F64))), 1e-5)
          << library << " " << m << "x" << k << "x" << n;
      for (const bool ta : {false, true})
        for (const bool tb : {false, true}) {
          Tensor c = Tensor::empty({m, n});
          ops::gemm(ta, tb, 1.0, ta ? at : a, tb ? bt : b, 0.0, c);
          Tensor a64 = (ta ? at : a).to(DType::F64), b64 = (tb ? bt : b).to(DType::F64);
          EXPECT_LT(relative_error(c, ops::matmul(ta ? a64.t() : a64, tb ? b64.t() : b64)), 1e-5)
              << library << " " << m << "x" << k << "x" << n << " " << ta << tb;
        }
      Tensor bias = randn({n}, r, 0, 1);
      EXPECT_LT(relative_error(ops::linear(a, bt, &bias),
                               ops::add(ops::linear(a.to(DType::F64), bt.to(DType::F64), nullptr), bias.to(DType::F64))),
                1e-5)
          << library;
    }
  }
}

// bf16 products: the operands rounded to bf16, each product exact, the sums in float32.
TEST(Linalg, Bf16ProductsAreThoseOfTheRoundedOperands) {
  Rng r(12);
  for_each_bf16_mode([&](bool native) {
    Tensor a = randn({96, 256}, r, 0, 1), b = randn({256, 160}, r, 0, 1);
    ops::set_bf16_products(true);
    // Emulated, the products read their operands as given: the autograd rounds them first.
    Tensor c = ops::matmul(ops::round_bf16(a), ops::round_bf16(b));
    Tensor c_raw = ops::matmul(a, b);
    ops::set_bf16_products(false);
    Tensor want = ops::matmul(ops::round_bf16(a).to(DType::F64), ops::round_bf16(b).to(DType::F64));
    EXPECT_LT(relative_error(c, want), 1e-6) << native;
    if (native) {
      EXPECT_LT(relative_error(c_raw, want), 1e-6);  // rounded by the kernel itself
    }
    EXPECT_GT(relative_error(ops::matmul(a, b), want), 1e-4);  // and bf16 rounding shows
  });
}

// bf16 products on each library the table can pick (libxsmm with its operands packed in
// pairs of rows, oneDNN), against float64 products of the same values: k sliced (over 512),
// odd (libxsmm leaves it to oneDNN), blocks of rows and of columns, n sliced (over 512), a
// transposed a.
TEST(Linalg, Bf16ProductsOnEveryLibraryMatchFloat64) {
  if (!kernels::bf16_native()) GTEST_SKIP() << "no bf16 instructions";
  Rng r(17);
  for (const char* library : {"gemm=onednn", "gemm=libxsmm", "gemm=auto"}) {
    ScopedKernels use(library);
    for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{7, 6, 3}, {128, 32, 128}, {64, 1030, 300},
                           {48, 128, 784}, {300, 2048, 96}, {33, 201, 40}, {256, 64, 600}}) {
      const Tensor a = randn({m, k}, r, 0, 1).to(DType::BF16), at = randn({k, m}, r, 0, 1).to(DType::BF16);
      const Tensor b = randn({k, n}, r, 0, 1).to(DType::BF16), bt = randn({n, k}, r, 0, 1).to(DType::BF16);
      for (const bool ta : {false, true})
        for (const bool tb : {false, true}) {
          Tensor c = Tensor::empty({m, n});
          ops::gemm(ta, tb, 1.0, ta ? at : a, tb ? bt : b, 0.0, c);
          const Tensor a64 = (ta ? at : a).to(DType::F64), b64 = (tb ? bt : b).to(DType::F64);
          // Each product exact, the float32 sums' rounding growing with k.
          EXPECT_LT(relative_error(c, ops::matmul(ta ? a64.t() : a64, tb ? b64.t() : b64)), k > 512 ? 1e-5 : 1e-6)
              << library << " " << m << "x" << k << "x" << n << " " << ta << tb;
        }
    }
  }
}

// The packing libxsmm's bf16 products read, and the transposes, element for element.
TEST(Xsmm, PairsAndTransposesMoveEveryElement) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{8, 8}, {2, 1}, {37, 70}, {128, 32}, {64, 129}}) {
    std::vector<std::uint16_t> in16(static_cast<size_t>(rows * (cols + 3)));
    std::vector<std::uint32_t> in32(in16.size());
    for (size_t i = 0; i < in16.size(); ++i) in16[i] = static_cast<std::uint16_t>(i * 7 + 1), in32[i] = static_cast<std::uint32_t>(i * 13 + 5);
    const int64_t ld = cols + 3;
    std::vector<std::uint16_t> out16(static_cast<size_t>(rows * cols));
    std::vector<std::uint32_t> out32(out16.size());
    xsmm::transpose_16(rows, cols, in16.data(), ld, out16.data());
    xsmm::transpose_32(rows, cols, in32.data(), ld, out32.data());
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        ASSERT_EQ(out16[j * rows + i], in16[i * ld + j]) << rows << "x" << cols;
        ASSERT_EQ(out32[j * rows + i], in32[i * ld + j]) << rows << "x" << cols;
      }
    if (rows % 2 != 0) continue;
    // b [rows, cols] row-major, and the same matrix stored transposed: rows 2i and 2i + 1 side by side.
    std::vector<std::uint16_t> t(static_cast<size_t>(cols * rows));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) t[j * rows + i] = in16[i * ld + j];
    std::vector<std::uint16_t> p1(out16.size()), p2(out16.size());
    xsmm::pack_bf16_pairs(rows, cols, in16.data(), ld, 1, p1.data());
    xsmm::pack_bf16_pairs(rows, cols, t.data(), 1, rows, p2.data());
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        ASSERT_EQ(p1[(i / 2) * 2 * cols + 2 * j + i % 2], in16[i * ld + j]) << rows << "x" << cols;
        ASSERT_EQ(p2[(i / 2) * 2 * cols + 2 * j + i % 2], in16[i * ld + j]) << rows << "x" << cols;
      }
  }
}

// bf16 tensors as operands: the product of their values in float32 (on bf16 instructions,
// or widened where the processor has none), with transposed views, beta 1, and a result
// written into a column range of a wider matrix; the same bits as rounding float32 operands.
TEST(Linalg, Bf16OperandsMultiplyAsTheirValues) {
  Rng r(16);
  // The operand gemm receives for op(operand) = x: x or x^T, stored row by row or as a
  // transposed view.
  auto operand = [](const Tensor& x, bool trans, bool view) {
    const Tensor stored = trans ? x.t().contiguous() : x;
    return view ? stored.t().contiguous().t() : stored;
  };
  for_each_bf16_mode([&](bool native) {
    Tensor a = randn({150, 96}, r, 0, 1), b = randn({96, 130}, r, 0, 1);
    Tensor ab = a.to(DType::BF16), bb = b.to(DType::BF16);
    const Tensor want = ops::matmul(ops::round_bf16(a).to(DType::F64), ops::round_bf16(b).to(DType::F64));
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (bool view : {false, true}) {
          const Tensor opa = operand(ab, ta, view), opb = operand(bb, tb, !view);
          Tensor wide = Tensor::zeros({150, 200});
          Tensor c = wide.slice(1, 40, 170);
          ops::gemm(ta, tb, 1.0, opa, opb, 0.0, c);
          EXPECT_LT(relative_error(c.contiguous(), want), 1e-6) << native << " " << ta << tb << view;
          EXPECT_EQ(ops::sum(wide.slice(1, 0, 40)).item(), 0.0);  // the rest of the rows untouched
          ops::gemm(ta, tb, 1.0, opa, opb, 1.0, c);
          EXPECT_LT(relative_error(c.contiguous(), ops::mul(want, 2.0)), 1e-6) << native;
        }
      }
    }
    // The same bits as the float32 operands rounded by the product itself (native) or first.
    const Tensor bt = b.t().contiguous();
    ops::set_bf16_products(true);
    const Tensor rounded = native ? ops::linear(a, bt, nullptr)
                                  : ops::linear(ops::round_bf16(a), ops::round_bf16(bt), nullptr);
    ops::set_bf16_products(false);
    EXPECT_TRUE(ops::equal(ops::linear(ab, bt.to(DType::BF16), nullptr), rounded)) << native;
    Tensor out = Tensor::empty({150, 130});
    EXPECT_THROW(ops::gemm(false, false, 2.0, ab, bb, 0.0, out), InternalError);  // alpha 1 only
  });
}

// Both convolution paths agree with float64 forward and backward: batches cut into slices
// (20 = 8 + 8 + 4), one input channel and several, strides and padding.
TEST(Conv, EveryLibraryMatchesFloat64ForwardAndBackward) {
  Rng r(13);
  struct Case {
    int64_t n, c, h, o, k, stride, pad;
  };
  for (const char* library : {"conv=im2col", "conv=onednn", "conv=auto"}) {
    ScopedKernels use(library);
    for (Case t : {Case{20, 1, 12, 8, 3, 1, 1}, Case{20, 16, 9, 24, 3, 1, 1}, Case{3, 8, 11, 5, 3, 2, 0},
                   Case{9, 3, 7, 4, 5, 2, 2}}) {
      Tensor x = randn({t.n, t.c, t.h, t.h}, r, 0, 1), w = randn({t.o, t.c, t.k, t.k}, r, 0, 1),
             b = randn({t.o}, r, 0, 1);
      auto f = ops::conv2d(x, w, b, t.stride, t.pad);
      auto f64 = ops::conv2d(x.to(DType::F64), w.to(DType::F64), b.to(DType::F64), t.stride, t.pad);
      EXPECT_LT(relative_error(f.out, f64.out), 1e-5) << library << " c=" << t.c;
      Tensor g = randn(f.out.shape(), r, 0, 1);
      auto d = ops::conv2d_backward(g, x.shape(), w, f.saved, f.saved_is_col, t.stride, t.pad, true, true);
      auto d64 = ops::conv2d_backward(g.to(DType::F64), x.shape(), w.to(DType::F64), f64.saved, f64.saved_is_col,
                                      t.stride, t.pad, true, true);
      EXPECT_LT(relative_error(d.dx, d64.dx), 1e-5) << library << " c=" << t.c;
      EXPECT_LT(relative_error(d.dw, d64.dw), 1e-5) << library << " c=" << t.c;
      EXPECT_LT(relative_error(d.db, d64.db), 1e-5) << library << " c=" << t.c;
    }
  }
}

// A batch of products under bf16 products gives the same bits on 1 and 2 threads: every
// product follows the calling thread's choice, whichever thread takes it.
TEST(Linalg, BatchedBf16ProductsDoNotDependOnTheThreadCount) {
  if (!onednn::has_bf16_instructions()) GTEST_SKIP() << "no AVX512-BF16 on this processor";
  Rng r(15);
  ScopedKernels use("bf16=native");
  Tensor a = randn({8, 64, 48}, r, 0, 1), b = randn({8, 48, 40}, r, 0, 1);
  const int threads = get_num_threads();
  auto product = [&](int t) {
    set_num_threads(t);
    ops::set_bf16_products(true);
    Tensor c = ops::matmul(a, b);
    ops::set_bf16_products(false);
    return c;
  };
  const Tensor one = product(1), two = product(2);
  set_num_threads(threads);
  EXPECT_TRUE(ops::equal(one, two)) << ops::max_abs_diff(one, two);
  // and they are bf16 products: those of the rounded operands
  EXPECT_LT(relative_error(two.select(0, 3), ops::matmul(ops::round_bf16(a.select(0, 3)).to(DType::F64),
                                                         ops::round_bf16(b.select(0, 3)).to(DType::F64))),
            1e-6);
}

// bf16 convolutions: the operands (input, weights, incoming gradient) rounded to bf16,
// each product exact, sums and results in float32.
TEST(Conv, Bf16ConvolutionsAreThoseOfTheRoundedOperands) {
  if (!onednn::has_bf16_instructions()) GTEST_SKIP() << "no AVX512-BF16 on this processor";
  Rng r(14);
  ScopedKernels use("bf16=native,conv=onednn");
  auto r64 = [](const Tensor& t) { return ops::round_bf16(t).to(DType::F64); };
  Tensor x = randn({20, 16, 9, 9}, r, 0, 1), w = randn({24, 16, 3, 3}, r, 0, 1), b = randn({24}, r, 0, 1);
  ops::set_bf16_products(true);
  auto f = ops::conv2d(x, w, b, 1, 1);
  Tensor g = randn(f.out.shape(), r, 0, 1);
  auto d = ops::conv2d_backward(g, x.shape(), w, f.saved, f.saved_is_col, 1, 1, true, true);
  ops::set_bf16_products(false);
  auto f64 = ops::conv2d(r64(x), r64(w), b.to(DType::F64), 1, 1);
  auto d64 = ops::conv2d_backward(r64(g), x.shape(), r64(w), f64.saved, f64.saved_is_col, 1, 1, true, true);
  EXPECT_LT(relative_error(f.out, f64.out), 1e-5);
  EXPECT_LT(relative_error(d.dx, d64.dx), 1e-5);
  EXPECT_LT(relative_error(d.dw, d64.dw), 1e-5);
  // and the rounding shows against float32 operands
  auto exact = ops::conv2d(x.to(DType::F64), w.to(DType::F64), b.to(DType::F64), 1, 1);
  EXPECT_GT(relative_error(f.out, exact.out), 1e-4);
}

// The slices of a batch depend on its size alone: at least 8 samples, at most 8 slices.
TEST(Conv, BatchSlicesDependOnTheBatchOnly) {
  EXPECT_EQ(ops::conv_batch_slices(1).count, 1);
  EXPECT_EQ(ops::conv_batch_slices(20).size, 8);
  EXPECT_EQ(ops::conv_batch_slices(20).count, 3);
  EXPECT_EQ(ops::conv_batch_slices(64).count, 8);
  EXPECT_EQ(ops::conv_batch_slices(1000).size, 125);
  EXPECT_EQ(ops::conv_batch_slices(1000).count, 8);
}

TEST(KernelTable, ReadsChoicesAndRefusesMistakes) {
  {
    ScopedKernels use("gemm=openblas,conv=im2col");
    EXPECT_EQ(kernels::gemm_f32(512, 512, 512), kernels::Gemm::OpenBlas);
    EXPECT_EQ(kernels::conv_forward(), kernels::Conv::Im2col);
    EXPECT_NE(kernels::summary().find("gemm openblas"), std::string::npos) << kernels::summary();
  }
  {
    ScopedKernels use("");
    const bool xsmm = xsmm::has_f32_kernels();
    EXPECT_EQ(kernels::gemm_f32(64, 256, 784), kernels::Gemm::OneDnn);
    EXPECT_EQ(kernels::gemm_f32(64, 10, 256), xsmm ? kernels::Gemm::Xsmm : kernels::Gemm::OpenBlas);
    EXPECT_EQ(kernels::gemm_f32(128, 32, 128), xsmm ? kernels::Gemm::Xsmm : kernels::Gemm::OpenBlas);
    EXPECT_EQ(kernels::conv_backward_data(1), kernels::Conv::Im2col);
    EXPECT_EQ(kernels::conv_backward_data(32), kernels::Conv::OneDnn);
    EXPECT_EQ(kernels::bf16_native(), onednn::has_bf16_instructions());
    // An attention head: on libxsmm's bf16 kernels, or a float32 product where only oneDNN's
    // would take it (its small products run slower than rounding costs).
    EXPECT_EQ(kernels::bf16_native(128, 128, 32), xsmm::has_bf16_kernels());
    EXPECT_EQ(kernels::bf16_native(64, 256, 784), onednn::has_bf16_instructions());
    EXPECT_EQ(kernels::bf16_native(2048, 384, 128), onednn::has_bf16_instructions());
    if (xsmm::has_bf16_kernels()) {
      EXPECT_EQ(kernels::gemm_bf16(128, 32, 128, true), kernels::Gemm::Xsmm);
      EXPECT_EQ(kernels::gemm_bf16(32, 32, 1024, true), kernels::Gemm::OneDnn);   // transposing a costs more
      EXPECT_EQ(kernels::gemm_bf16(64, 64, 63, false), kernels::Gemm::OneDnn);    // libxsmm takes pairs of k
      EXPECT_EQ(kernels::gemm_bf16(2048, 384, 128, false), kernels::Gemm::OneDnn);  // as fast, no packing
    }
  }
  {
    ScopedKernels use("gemm=onednn");
    EXPECT_EQ(kernels::gemm_f32(64, 10, 256), kernels::Gemm::OneDnn);
    EXPECT_EQ(kernels::gemm_bf16(128, 32, 128, false), kernels::Gemm::OneDnn);
  }
  for (const char* bad : {"gemm=mkl", "conv", "winograd=on", "bf16=fast"}) {
    ScopedKernels use(bad);
    EXPECT_THROW(kernels::gemm_f32(1, 1, 1), ConfigError) << bad;
  }
}

TEST(Linalg, MatmulMatchesNaiveIncludingTransposedViews) {
  Rng r(5);
  for (auto dt : {DType::F32, DType::F64}) {
    Tensor a = randn({7, 5}, r, 0, 1, dt), b = randn({5, 3}, r, 0, 1, dt);
    double tol = dt == DType::F32 ? 1e-5 : 1e-12;
    EXPECT_LT(ops::max_abs_diff(ops::matmul(a, b), naive_matmul(a, b)), tol);
    Tensor at = randn({5, 7}, r, 0, 1, dt);
    EXPECT_LT(ops::max_abs_diff(ops::matmul(at.t(), b), naive_matmul(at.t(), b)), tol);
    Tensor c = Tensor::empty({3, 7}, dt);
    ops::gemm(true, true, 1.0, b, a, 0.0, c);  // b^T a^T = (a b)^T
    EXPECT_LT(ops::max_abs_diff(c, naive_matmul(a, b).t().contiguous()), tol);
  }
}

TEST(Linalg, BatchedMatmulAndLinear) {
  Rng r(6);
  Tensor a = randn({4, 3, 5}, r, 0, 1, DType::F64), b = randn({4, 5, 2}, r, 0, 1, DType::F64);
  Tensor c = ops::matmul(a, b);
  for (int64_t i = 0; i < 4; ++i)
    EXPECT_LT(ops::max_abs_diff(c.select(0, i), naive_matmul(a.select(0, i), b.select(0, i))), 1e-12);
  Tensor shared = randn({5, 2}, r, 0, 1, DType::F64);
  Tensor d = ops::matmul(a, shared);
  EXPECT_LT(ops::max_abs_diff(d.select(0, 2), naive_matmul(a.select(0, 2), shared)), 1e-12);
  Tensor x = randn({6, 5}, r, 0, 1, DType::F64), w = randn({3, 5}, r, 0, 1, DType::F64);
  Tensor bias = randn({3}, r, 0, 1, DType::F64);
  Tensor y = ops::linear(x, w, &bias);
  EXPECT_LT(ops::max_abs_diff(y, ops::add(naive_matmul(x, w.t()), bias)), 1e-12);
  // Empty inner dimension gives zeros.
  Tensor e = ops::matmul(Tensor::zeros({2, 0}), Tensor::zeros({0, 3}));
  EXPECT_EQ(ops::sum(e).item(), 0.0);
}

TEST(Conv, OutputSizeFormula) {
  // Seed 002 chapter 4: (6 - 3) / 1 + 1 = 4; 96 -> 94 -> pool 47 -> 45 -> pool 22 (floor).
  EXPECT_EQ(ops::conv_output_size(6, 3, 1, 0), 4);
  EXPECT_EQ(ops::conv_output_size(96, 3, 1, 0), 94);
  EXPECT_EQ(ops::conv_output_size(94, 2, 2, 0), 47);
  EXPECT_EQ(ops::conv_output_size(47, 3, 1, 0), 45);
  EXPECT_EQ(ops::conv_output_size(45, 2, 2, 0), 22);
  EXPECT_EQ(ops::conv_output_size(28, 3, 1, 1), 28);
  EXPECT_EQ(ops::conv_output_size(7, 3, 2, 1), 4);
  EXPECT_THROW(ops::conv_output_size(2, 5, 1, 0), InternalError);
}

TEST(Conv, MatchesNaiveForStridesAndPadding) {
  Rng r(7);
  for (auto [stride, pad] : {std::pair<int64_t, int64_t>{1, 0}, {1, 1}, {2, 0}, {2, 1}, {3, 2}}) {
    Tensor x = randn({2, 3, 7, 6}, r, 0, 1, DType::F64), w = randn({4, 3, 3, 3}, r, 0, 1, DType::F64);
    Tensor b = randn({4}, r, 0, 1, DType::F64);
    auto f = ops::conv2d(x, w, b, stride, pad);
    EXPECT_LT(ops::max_abs_diff(f.out, naive_conv(x, w, b, stride, pad)), 1e-12) << stride << " " << pad;
  }
}

TEST(Conv, Col2imIsTheAdjointOfIm2col) {
  // <im2col(x), c> == <x, col2im(c)> for all x, c.
  Rng r(8);
  Shape xs{2, 3, 6, 5};
  Tensor x = randn(xs, r, 0, 1, DType::F64);
  Tensor col = ops::im2col(x, 3, 3, 2, 1);
  Tensor c = randn(col.shape(), r, 0, 1, DType::F64);
  double lhs = ops::sum(ops::mul(col, c)).item();
  double rhs = ops::sum(ops::mul(x, ops::col2im(c, xs, 3, 3, 2, 1))).item();
  EXPECT_NEAR(lhs, rhs, 1e-10);
}

TEST(Conv, Col2imOfSameConvolutionsMatchesTheDefinition) {
  // Stride 1 with the output as large as the input ("same": k = 1, 3, 5 with pad (k-1)/2)
  // takes a vectorized path; odd sizes put the masked columns at every edge. Sums taken in
  // the same (i, j) order as the definition are exactly equal.
  Rng r(9);
  for (std::int64_t k : {1, 3, 5}) {
    const std::int64_t pad = (k - 1) / 2, N = 2, C = 3, H = 5, W = 7;
    Shape xs{N, C, H, W};
    Tensor c = randn({C * k * k, N * H * W}, r, 0, 1, DType::F32);
    Tensor want = Tensor::zeros(xs, DType::F32);
    const float* pc = c.data<float>();
    float* pw = want.data<float>();
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t ch = 0; ch < C; ++ch)
        for (std::int64_t i = 0; i < k; ++i)
          for (std::int64_t j = 0; j < k; ++j)
            for (std::int64_t oh = 0; oh < H; ++oh)
              for (std::int64_t ow = 0; ow < W; ++ow) {
                const std::int64_t ih = oh - pad + i, iw = ow - pad + j;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                pw[((n * C + ch) * H + ih) * W + iw] += pc[((ch * k + i) * k + j) * N * H * W + n * H * W + oh * W + ow];
              }
    EXPECT_EQ(ops::max_abs_diff(ops::col2im(c, xs, k, k, 1, pad), want), 0.0) << "k " << k;
  }
}

TEST(Pool, MaxPoolForwardAndBackward) {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 5, 3,   //
                                                    4, 0, 1, 1,   //
                                                    7, 8, 2, 9,   //
                                                    6, 5, 3, 4},
                                 {1, 1, 4, 4});
  auto f = ops::max_pool2d(x, 2, 2);
  EXPECT_EQ(f.out.to_vector(), (std::vector<double>{4, 5, 8, 9}));
  Tensor g = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {1, 1, 2, 2});
  Tensor dx = ops::max_pool2d_backward(g, *f.argmax, x.shape());
  EXPECT_EQ(dx.to_vector(), (std::vector<double>{0, 0, 2, 0, 1, 0, 0, 0, 0, 3, 0, 4, 0, 0, 0, 0}));
  // Floor mode: a 5x5 input pools to 2x2.
  EXPECT_EQ(ops::max_pool2d(Tensor::zeros({1, 2, 5, 5}), 2, 2).out.shape(), (Shape{1, 2, 2, 2}));
}

TEST(Softmax, StableAndNormalized) {
  Tensor z = Tensor::from_vector(std::vector<double>{1000, 1001, 1002, -5, 0, 5}, {2, 3});
  Tensor p = ops::softmax(z);
  for (int64_t r = 0; r < 2; ++r) EXPECT_NEAR(p.at({r, 0}) + p.at({r, 1}) + p.at({r, 2}), 1.0, 1e-12);
  EXPECT_NEAR(p.at({0, 2}), 1.0 / (1.0 + std::exp(-1.0) + std::exp(-2.0)), 1e-12);
  Tensor lp = ops::log_softmax(z);
  EXPECT_NEAR(lp.at({1, 0}), std::log(p.at({1, 0})), 1e-12);
  // Seed 002 chapter 1: sigmoid(4.8) = 0.992, sigmoid(0.5) = 0.622.
  Tensor s = ops::sigmoid(Tensor::from_vector(std::vector<double>{4.8, 0.5, -7.0, -5.0}, {4}));
  EXPECT_NEAR(s.at({0}), 0.991837, 1e-6);
  EXPECT_NEAR(s.at({1}), 0.622459, 1e-6);
  EXPECT_NEAR(s.at({2}), 0.000911, 1e-6);
  EXPECT_NEAR(s.at({3}), 0.006693, 1e-6);  // not the book's 0.0998 (erratum)
}

TEST(FastMath, ExpAndTanhAgreeWithLibm) {
  double exp_rel = 0, tanh_abs = 0;
  for (float x = -87.0f; x < 88.5f; x += 0.001f) {
    const double e = std::exp(static_cast<double>(x));
    exp_rel = std::max(exp_rel, std::fabs(fast_exp(x) - e) / e);
  }
  for (float x = -12.0f; x < 12.0f; x += 0.0001f) {
    tanh_abs = std::max(tanh_abs, std::fabs(fast_tanh(x) - std::tanh(static_cast<double>(x))));
  }
  EXPECT_LT(exp_rel, 2e-7);
  EXPECT_LT(tanh_abs, 3e-7);
  EXPECT_EQ(fast_exp(-std::numeric_limits<float>::infinity()), 0.0f);  // masked attention scores
  EXPECT_EQ(fast_exp(-100.0f), 0.0f);
  EXPECT_EQ(fast_exp(0.0f), 1.0f);
  EXPECT_TRUE(std::isinf(fast_exp(100.0f)));
  EXPECT_TRUE(std::isnan(fast_exp(std::nanf(""))));
  EXPECT_EQ(fast_tanh(50.0f), 1.0f);
  EXPECT_EQ(fast_tanh(-50.0f), -1.0f);
}

TEST(FastMath, FloatSoftmaxMatchesDouble) {
  Rng rng(3);
  Tensor z = randn({7, 131}, rng, 0.0, 3.0, DType::F64);
  Tensor p64 = ops::softmax(z), p32 = ops::softmax(z.to(DType::F32));
  EXPECT_LT(ops::max_abs_diff(p32.to(DType::F64), p64), 5e-7);
}
