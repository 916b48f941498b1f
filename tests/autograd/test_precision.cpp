// bfloat16 storage and mixed precision: rounding, conversions, the products' bf16 operands,
// activations stored in half the bytes, and a graph that keeps no values of its own.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "weft/autograd/functions.h"
#include "weft/autograd/sequence.h"
#include "weft/tensor/allocator.h"
#include "weft/tensor/linalg.h"
#include "weft/tensor/onednn.h"
#include "weft/tensor/ops.h"
#include "weft/tensor/rng.h"
#include "weft/tensor/thread_pool.h"
#include "../scoped_kernels.h"

using namespace weft;
using weft::testing::for_each_bf16_mode;
using weft::testing::ScopedKernels;

namespace {
std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float round_trip(float f) { return from_bf16(to_bf16(f)); }
Rng g_precision_rng(7);
Tensor rnd_f32(const Shape& s) { return rand_uniform(s, g_precision_rng, -1.0, 1.0, DType::F32); }
}  // namespace

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(to_bf16(1.0f).bits, 0x3F80);
  EXPECT_EQ(to_bf16(-2.0f).bits, 0xC000);
  const float ulp = std::ldexp(1.0f, -7);  // spacing of bf16 values in [1, 2)
  EXPECT_EQ(round_trip(1.0f + ulp / 2), 1.0f);                                  // tie: to the even 1.0
  EXPECT_EQ(round_trip(1.0f + 3 * ulp / 2), 1.0f + 2 * ulp);                    // tie: to the even 1 + 2 ulp
  EXPECT_EQ(round_trip(1.0f + ulp / 2 + std::ldexp(1.0f, -20)), 1.0f + ulp);    // above the tie: up
  EXPECT_EQ(round_trip(1.0f + ulp / 2 - std::ldexp(1.0f, -20)), 1.0f);          // below: down
  EXPECT_EQ(bits_of(round_trip(-0.0f)), bits_of(-0.0f));
  EXPECT_TRUE(std::isinf(round_trip(std::numeric_limits<float>::infinity())));
  EXPECT_TRUE(std::isinf(round_trip(std::numeric_limits<float>::max())));  // beyond the largest bf16
  EXPECT_TRUE(std::isnan(round_trip(std::numeric_limits<float>::quiet_NaN())));
  // Every bf16 value survives the round trip unchanged.
  for (std::uint32_t b = 0; b < 0x10000; b += 97) {
    bf16 h{static_cast<std::uint16_t>(b)};
    float f = from_bf16(h);
    if (!std::isnan(f)) {
      EXPECT_EQ(to_bf16(f).bits, h.bits);
    }
  }
}

TEST(Bf16, TensorsConvertAndAreStorageOnly) {
  Tensor a = rnd_f32({6, 5});
  Tensor h = a.transpose(0, 1).to(DType::BF16);  // from a strided view
  EXPECT_EQ(h.dtype(), DType::BF16);
  EXPECT_EQ(h.nbytes(), 30u * 2);
  Tensor back = h.to(DType::F32);
  Tensor want = ops::round_bf16(a.transpose(0, 1).contiguous());
  EXPECT_TRUE(ops::equal(back, want));
  for (float v : back.to_float_vector()) EXPECT_EQ(round_trip(v), v);
  EXPECT_LE(ops::max_abs_diff(back, a.transpose(0, 1)), std::ldexp(1.0, -8));  // |x| < 1: half an ulp
  EXPECT_TRUE(ops::equal(h.to(DType::F64).to(DType::F32), back));
  EXPECT_THROW(ops::add(h, h), InternalError);  // no arithmetic in bf16
}

TEST(Graph, KeepsOnlyTheValuesBackwardNeeds) {
  // add() saves nothing for backward, so a long chain of additions holds one value at a
  // time: the graph itself keeps no values.
  Var x(rnd_f32({1024}), true);
  const std::size_t before = allocator_live_bytes();
  Var y = x;
  for (int i = 0; i < 16; ++i) y = add(y, x);
  EXPECT_LE(allocator_live_bytes() - before, 2 * 1024 * sizeof(float));
  sum(y).backward();
  for (float g : x.grad().to_float_vector()) EXPECT_EQ(g, 17.0f);
}

// Products read bf16 operands: the product is that of the rounded operands accumulated in
// float32 (a bf16 x bf16 product is exact in float32; only the order of the sums may differ
// between libraries). With bf16 instructions (native) the incoming gradient is rounded too,
// as the product runs in bf16 both ways; emulated, it stays float32.
TEST(MixedPrecision, ProductsReadBf16Operands) {
  Tensor xv = rnd_f32({8, 16}), wv = rnd_f32({4, 16}), bv = rnd_f32({4}), gv = rnd_f32({8, 4});
  auto f64 = [](const Tensor& t) { return t.to(DType::F64); };
  const Tensor fp32 = ops::linear(xv, wv, &bv);
  for_each_bf16_mode([&](bool native) {
    Var x(xv, true), w(wv, true), b(bv, true);
    {
      Bf16Guard bf16(true);
      Var y = linear(x, w, b);
      Tensor want = ops::linear(f64(ops::round_bf16(xv)), f64(ops::round_bf16(wv)), nullptr);
      EXPECT_TRUE(ops::allclose(f64(y.value()), ops::add(want, f64(bv)), 1e-6, 1e-6)) << native;
      EXPECT_FALSE(ops::allclose(y.value(), fp32, 1e-5, 1e-5)) << native;
      y.backward(gv);
    }
    Tensor g = native ? ops::round_bf16(gv) : gv;
    EXPECT_TRUE(ops::allclose(f64(x.grad()), ops::matmul(f64(g), f64(ops::round_bf16(wv))), 1e-6, 1e-6)) << native;
    EXPECT_TRUE(ops::allclose(f64(w.grad()), ops::matmul(f64(g).t(), f64(ops::round_bf16(xv))), 1e-6, 1e-6))
        << native;
    EXPECT_TRUE(ops::allclose(b.grad(), ops::sum(gv, {0}, false), 1e-6, 1e-7));
    EXPECT_FALSE(bf16_enabled());  // the guard restored the mode
  });
}

TEST(MixedPrecision, StoresActivationsInHalfTheBytes) {
  // softmax keeps its output for backward and the product keeps it again as an operand:
  // fp32 shares one tensor; bf16 stores one half-size copy (not two).
  Tensor xv = rnd_f32({64, 256}), wv = rnd_f32({256, 256});
  auto saved_bytes = [&](bool bf16, Tensor* grad) {
    Bf16Guard precision(bf16);
    Var leaf(xv, true), w(wv, true);
    const std::size_t before = allocator_live_bytes();
    Var z = [&] { return matmul(softmax(tanh(mul(leaf, 2.0))), w); }();  // intermediates' handles are gone
    const std::size_t saved = allocator_live_bytes() - before - z.value().nbytes();
    sum(z).backward();
    *grad = leaf.grad();
    return saved;
  };
  Tensor g32, g16;
  const std::size_t fp32 = saved_bytes(false, &g32), bf16 = saved_bytes(true, &g16);
  const std::size_t act = 64 * 256 * sizeof(float);  // one activation in fp32
  EXPECT_EQ(fp32, 2 * act);  // tanh's output and softmax's output
  EXPECT_EQ(bf16, act);      // the same two, in bf16
  // Gradients agree to bf16's precision.
  EXPECT_LE(ops::max_abs_diff(g16, g32), 0.02 * ops::max_abs_diff(g32, ops::mul(g32, 0.0)));
}

TEST(MixedPrecision, StoredCopiesFollowInPlaceUpdates) {
  // A view of a parameter is an activation (stored in bf16); after an in-place update of the
  // parameter (an optimizer step) the next step must store the new values, not reuse a copy.
  Var w(rnd_f32({4, 4}), true), x(rnd_f32({2, 4}), true);
  Bf16Guard bf16(true);
  for (int step = 0; step < 2; ++step) {
    x.clear_grad();
    sum(matmul(x, reshape(w, {4, 4}))).backward();
    const Tensor want = ops::matmul(Tensor::ones({2, 4}), ops::round_bf16(w.value()).t());
    EXPECT_TRUE(ops::allclose(x.grad(), want, 1e-6, 1e-6)) << "step " << step;
    ops::add_(w.mutable_value(), Tensor::ones({4, 4}));
  }
}

// Under mixed precision the fused attention reads bf16-rounded q, k, v and attention
// weights, as the composed products do, and stores both in bf16, its products on bf16
// instructions or emulated; its results do not depend on the thread count.
TEST(MixedPrecision, FusedAttentionReadsBf16OperandsWhateverTheThreads) {
  for_each_bf16_mode([](bool native) {
    Tensor xv = rnd_f32({2, 24, 3 * 32}), gv = rnd_f32({2, 24, 32});
    auto run = [&](bool bf16, int threads, Tensor* grad) {
      const int before = get_num_threads();
      set_num_threads(threads);
      Var x(xv, true);
      Tensor y;
      {
        Bf16Guard precision(bf16);
        Var out = causal_self_attention(x, 4);
        y = out.value();
        out.backward(gv);
      }
      set_num_threads(before);
      *grad = x.grad();
      return y;
    };
    Tensor g1, g2, g32;
    const Tensor one = run(true, 1, &g1), two = run(true, 2, &g2), fp32 = run(false, 2, &g32);
    EXPECT_TRUE(ops::equal(one, two)) << native;
    EXPECT_TRUE(ops::equal(g1, g2)) << native;
    EXPECT_FALSE(ops::allclose(two, fp32, 1e-6, 1e-6)) << native;  // bf16 operands change the results
    EXPECT_TRUE(ops::allclose(two, fp32, 2e-2, 2e-2)) << native;    // by their rounding only
    // the same as attention on the rounded operands in float32
    Var r(ops::round_bf16(xv), true);
    EXPECT_TRUE(ops::allclose(two, causal_self_attention(r, 4).value(), 1e-2, 1e-2)) << native;
  });
}

// Under mixed precision GELU rounds its input (kept for backward) and its output (the next
// product's operand) to bf16 in its own pass: it keeps just those two half-size copies
// beside its output, the next product takes the output's copy, and the gradient is the one
// of the rounded input, bit for bit.
TEST(MixedPrecision, GeluKeepsBf16CopiesMadeInItsOwnPass) {
  Tensor hv = rnd_f32({64, 512}), gv = rnd_f32({64, 512}), wv = rnd_f32({32, 512});
  Var leaf(hv, true), w(wv, true);
  std::size_t kept = 0, product_kept = 0;
  Tensor y_value;
  {
    Bf16Guard on(true);
    Var h = mul(leaf, 1.0);  // an activation, not a leaf
    const std::size_t before = allocator_live_bytes();
    Var y = gelu(h);
    kept = allocator_live_bytes() - before;
    y_value = y.value();
    const std::size_t before_product = allocator_live_bytes();
    Var z = linear(y, w, Var());
    product_kept = allocator_live_bytes() - before_product - z.value().nbytes();
    y.backward(gv);
  }
  EXPECT_EQ(kept, y_value.nbytes() + 2 * 64u * 512u * 2u);
  EXPECT_LT(product_kept, 64u * 512u * 2u);  // the product made no copy of its own
  Var r(ops::round_bf16(hv), true);
  Var yr = gelu(r);
  yr.backward(gv);
  EXPECT_TRUE(ops::equal(leaf.grad(), r.grad()));
  EXPECT_TRUE(ops::equal(y_value, gelu(Var(hv)).value()));  // the values themselves stay float32
}
