// Every differentiable operation against central finite differences in double.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>

#include "weft/autograd/functions.h"
#include "weft/autograd/gradcheck.h"
#include "weft/tensor/allocator.h"
#include "weft/tensor/ops.h"
#include "weft/tensor/rng.h"
#include "weft/tensor/thread_pool.h"

using namespace weft;

namespace {
Rng g_rng(2024);
Tensor rnd(const Shape& s, double lo = -1.0, double hi = 1.0) { return rand_uniform(s, g_rng, lo, hi, DType::F64); }
// Values kept away from 0, where ReLU and max are not differentiable.
Tensor rnd_away_from_zero(const Shape& s) {
  Tensor t = rnd(s, 0.2, 1.0);
  Tensor sign = rnd(s);
  double* p = t.data<double>();
  const double* q = sign.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (q[i] < 0) p[i] = -p[i];
  return t;
}

void expect_gradcheck(const char* what, const std::function<Var(const std::vector<Var>&)>& f,
                      const std::vector<Tensor>& inputs) {
  GradcheckResult r = gradcheck(f, inputs);
  EXPECT_TRUE(r.ok) << what << ": " << r.message << " (max error " << r.max_abs_error << ")";
}
}  // namespace

TEST(Gradcheck, ElementwiseBroadcasting) {
  expect_gradcheck("add", [](auto& v) { return add(v[0], v[1]); }, {rnd({3, 4}), rnd({4})});
  expect_gradcheck("sub", [](auto& v) { return sub(v[0], v[1]); }, {rnd({3, 1}), rnd({2, 1, 4})});
  expect_gradcheck("mul", [](auto& v) { return mul(v[0], v[1]); }, {rnd({3, 4}), rnd({3, 1})});
  expect_gradcheck("div", [](auto& v) { return div(v[0], v[1]); }, {rnd({2, 3}), rnd({3}, 0.5, 2.0)});
  expect_gradcheck("add scalar", [](auto& v) { return add(v[0], 3.0); }, {rnd({5})});
  expect_gradcheck("mul scalar", [](auto& v) { return mul(v[0], -2.5); }, {rnd({5})});
  expect_gradcheck("neg", [](auto& v) { return neg(v[0]); }, {rnd({5})});
}

TEST(Gradcheck, UnaryFunctions) {
  expect_gradcheck("exp", [](auto& v) { return exp(v[0]); }, {rnd({4, 3})});
  expect_gradcheck("log", [](auto& v) { return log(v[0]); }, {rnd({4, 3}, 0.5, 3.0)});
  expect_gradcheck("relu", [](auto& v) { return relu(v[0]); }, {rnd_away_from_zero({4, 3})});
  expect_gradcheck("sigmoid", [](auto& v) { return sigmoid(v[0]); }, {rnd({4, 3}, -4, 4)});
  expect_gradcheck("tanh", [](auto& v) { return tanh(v[0]); }, {rnd({4, 3}, -2, 2)});
}

TEST(Gradcheck, LinearAlgebra) {
  expect_gradcheck("matmul", [](auto& v) { return matmul(v[0], v[1]); }, {rnd({3, 4}), rnd({4, 2})});
  expect_gradcheck("batched matmul", [](auto& v) { return matmul(v[0], v[1]); }, {rnd({2, 3, 4}), rnd({2, 4, 5})});
  expect_gradcheck("batched x shared", [](auto& v) { return matmul(v[0], v[1]); }, {rnd({2, 3, 4}), rnd({4, 5})});
  expect_gradcheck("linear", [](auto& v) { return linear(v[0], v[1], v[2]); }, {rnd({5, 4}), rnd({3, 4}), rnd({3})});
  expect_gradcheck("linear no bias", [](auto& v) { return linear(v[0], v[1], Var()); }, {rnd({5, 4}), rnd({3, 4})});
}

TEST(Gradcheck, ReductionsAndShapes) {
  expect_gradcheck("sum", [](auto& v) { return sum(v[0]); }, {rnd({3, 4})});
  expect_gradcheck("sum dims", [](auto& v) { return sum(v[0], {0, 2}, false); }, {rnd({2, 3, 4})});
  expect_gradcheck("sum keepdim", [](auto& v) { return sum(v[0], {1}, true); }, {rnd({2, 3, 4})});
  expect_gradcheck("mean", [](auto& v) { return mean(v[0]); }, {rnd({3, 4})});
  expect_gradcheck("reshape", [](auto& v) { return reshape(v[0], {4, 3}); }, {rnd({3, 4})});
  expect_gradcheck("flatten", [](auto& v) { return flatten(v[0], 1); }, {rnd({2, 3, 2})});
  expect_gradcheck("transpose", [](auto& v) { return transpose(v[0], 0, 2); }, {rnd({2, 3, 4})});
}

TEST(Gradcheck, SoftmaxAndLosses) {
  expect_gradcheck("softmax", [](auto& v) { return softmax(v[0]); }, {rnd({3, 5}, -3, 3)});
  expect_gradcheck("log_softmax", [](auto& v) { return log_softmax(v[0]); }, {rnd({3, 5}, -3, 3)});
  std::vector<int32_t> targets{4, 0, 2};
  expect_gradcheck("cross_entropy", [&](auto& v) { return cross_entropy(v[0], targets); }, {rnd({3, 5}, -3, 3)});
  expect_gradcheck("mse", [](auto& v) { return mse_loss(v[0], v[1]); }, {rnd({4, 2}), rnd({4, 2})});
  expect_gradcheck("half mse", [](auto& v) { return half_mse_loss(v[0], v[1]); }, {rnd({4, 2}), rnd({4, 2})});
}

TEST(Gradcheck, Convolution) {
  for (auto [stride, pad] : {std::pair<int64_t, int64_t>{1, 0}, {1, 1}, {2, 1}}) {
    expect_gradcheck("conv2d", [stride = stride, pad = pad](auto& v) { return conv2d(v[0], v[1], v[2], stride, pad); },
                     {rnd({2, 2, 5, 5}), rnd({3, 2, 3, 3}), rnd({3})});
  }
  expect_gradcheck("conv2d no bias", [](auto& v) { return conv2d(v[0], v[1], Var(), 1, 1); },
                   {rnd({1, 2, 4, 4}), rnd({2, 2, 3, 3})});
}

TEST(Gradcheck, MaxPoolAndDropout) {
  // Distinct values so the maximum of each window is unique.
  Tensor x = Tensor::arange(2 * 3 * 4 * 4, DType::F64).view({2, 3, 4, 4});
  Tensor perm = rnd({96});
  x = ops::add(ops::mul(x, 0.01), ops::mul(perm.view({2, 3, 4, 4}), 0.001));
  expect_gradcheck("max_pool2d", [](auto& v) { return max_pool2d(v[0], 2, 2); }, {x});
  expect_gradcheck("relu_max_pool2d", [](auto& v) { return relu_max_pool2d(v[0], 2, 2); }, {x});
  expect_gradcheck("dropout", [](auto& v) {
    Rng r(99);  // the same mask on every evaluation
    return dropout(v[0], 0.3, r);
  }, {rnd({4, 5})});
}

TEST(Autograd, GradientsAccumulateOverSharedUses) {
  // y = x * x + x: dy/dx = 2x + 1; x used three times.
  Var x(Tensor::from_vector(std::vector<double>{1.5, -2.0}, {2}), true);
  Var y = sum(add(mul(x, x), x));
  y.backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{4.0, -3.0}));
  // A second backward accumulates into the leaf, as in PyTorch.
  Var y2 = sum(x);
  y2.backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{5.0, -2.0}));
}

TEST(Autograd, NoGradRecordsNothing) {
  Var x(Tensor::ones({2}), true);
  Var y;
  {
    NoGradGuard g;
    y = mul(x, 2.0);
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(y.is_leaf());
  EXPECT_THROW(y.backward(Tensor::ones({2})), InternalError);
}

TEST(Autograd, DeepChainsDoNotOverflowTheStack) {
  Var x(Tensor::scalar(1.0, DType::F64), true);
  Var h = x;
  for (int i = 0; i < 100000; ++i) h = mul(h, 1.0);
  h.backward();
  EXPECT_EQ(x.grad().item(), 1.0);
}

TEST(Autograd, GradReadyHooksFireOnceWithTheFinalGradient) {
  // x is used three times, w once; each hook fires once, after its last contribution.
  Var x(Tensor::from_vector(std::vector<double>{2.0}, {1}), true);
  Var w(Tensor::from_vector(std::vector<double>{3.0}, {1}), true);
  int x_fired = 0, w_fired = 0;
  double x_grad_at_hook = 0;
  x.set_grad_ready_hook([&] {
    ++x_fired;
    x_grad_at_hook = x.grad().item();
  });
  w.set_grad_ready_hook([&] { ++w_fired; });
  Var y = add(mul(mul(x, x), w), x);  // y = w x^2 + x
  y.backward(Tensor::ones({1}, DType::F64));
  EXPECT_EQ(x_fired, 1);
  EXPECT_EQ(w_fired, 1);
  EXPECT_DOUBLE_EQ(x_grad_at_hook, 2 * 3.0 * 2.0 + 1);  // 2 w x + 1, complete when the hook ran
  EXPECT_DOUBLE_EQ(w.grad().item(), 4.0);
}

#include "weft/autograd/sequence.h"

TEST(Gradcheck, SequenceOperations) {
  expect_gradcheck("embedding", [](auto& v) { return embedding(v[0], {3, 0, 3, 1}); }, {rnd({5, 4})});
  expect_gradcheck("layer_norm", [](auto& v) { return layer_norm(v[0], v[1], v[2]); }, {rnd({2, 3, 6}), rnd({6}), rnd({6})});
  expect_gradcheck("layer_norm plain", [](auto& v) { return layer_norm(v[0], Var(), Var()); }, {rnd({4, 5})});
  expect_gradcheck("gelu", [](auto& v) { return gelu(v[0]); }, {rnd({3, 7}, -3, 3)});
  expect_gradcheck("causal softmax", [](auto& v) { return softmax(causal_mask(v[0])); }, {rnd({2, 4, 4})});
  expect_gradcheck("fused causal softmax", [](auto& v) { return causal_softmax(v[0], 0.37); }, {rnd({2, 5, 5})});
  expect_gradcheck("causal self-attention", [](auto& v) { return causal_self_attention(v[0], 2); },
                   {rnd({2, 5, 12})});
  expect_gradcheck("grouped-query attention", [](auto& v) { return causal_self_attention(v[0], 4, 2); },
                   {rnd({2, 5, 24})});
  expect_gradcheck("multi-query attention, sliding window", [](auto& v) { return causal_self_attention(v[0], 2, 1, 2); },
                   {rnd({1, 6, 12})});
  expect_gradcheck("rms_norm", [](auto& v) { return rms_norm(v[0], v[1]); }, {rnd({2, 3, 6}), rnd({6})});
  expect_gradcheck("swiglu", [](auto& v) { return swiglu(v[0]); }, {rnd({3, 8}, -3, 3)});
  expect_gradcheck("rotary", [](auto& v) { return rotary(v[0], {0, 3, 7}, 2, {1.0, 0.1}); }, {rnd({3, 10})});
  expect_gradcheck("narrow", [](auto& v) { return narrow(v[0], 1, 2, 3); }, {rnd({2, 6, 3})});
  expect_gradcheck("concat", [](auto& v) { return concat({v[0], v[1]}, 1); }, {rnd({2, 3}), rnd({2, 4})});
}

// The fused attention softmax gives the composed operations' values bit for bit, and their
// gradients within rounding (its backward may accumulate with fused multiply-adds), in
// float32 (the training type) and float64.
TEST(Sequence, FusedCausalSoftmaxIsTheComposedOneBitForBit) {
  Rng rng(3);
  for (DType dt : {DType::F32, DType::F64}) {
    Tensor x = randn({6, 17, 17}, rng, 0, 3, dt), g = randn({6, 17, 17}, rng, 0, 1, dt);
    Var a(x, true), b(x, true);
    const double scale = 1.0 / std::sqrt(32.0);
    Var fused = causal_softmax(a, scale), composed = softmax(causal_mask(mul(b, scale)));
    EXPECT_TRUE(ops::equal(fused.value(), composed.value())) << dtype_name(dt);
    fused.backward(g);
    composed.backward(g);
    EXPECT_TRUE(ops::allclose(a.grad(), b.grad(), dt == DType::F32 ? 1e-5 : 1e-13, dt == DType::F32 ? 1e-7 : 1e-16))
        << dtype_name(dt) << " " << ops::max_abs_diff(a.grad(), b.grad());
  }
}

// A linear layer and its ReLU as one operation: the composed values and gradients bit for
// bit, with pre-activations of exactly zero, NaN, and a layer without bias.
TEST(Linear, FusedLinearReluIsTheComposedOneBitForBit) {
  Rng rng(6);
  for (DType dt : {DType::F32, DType::F64}) {
    for (bool bias : {true, false}) {
      Tensor x = randn({9, 7}, rng, 0, 1, dt), w = randn({5, 7}, rng, 0, 1, dt), b = randn({5}, rng, 0, 1, dt);
      x.set({2, 3}, std::nan(""));
      w.set({4, 0}, 0.0);
      for (std::int64_t c = 0; c < 7; ++c) x.set({3, c}, 0.0);  // row 3: exactly the bias (or 0)
      Var x1(x, true), w1(w, true), b1(b, true), x2(x, true), w2(w, true), b2(b, true);
      Var fused = linear_relu(x1, w1, bias ? b1 : Var()), composed = relu(linear(x2, w2, bias ? b2 : Var()));
      EXPECT_TRUE(ops::equal(fused.value(), composed.value())) << dtype_name(dt) << " bias " << bias;
      Tensor g = randn(fused.value().shape(), rng, 0, 1, dt);
      fused.backward(g);
      composed.backward(g);
      EXPECT_TRUE(ops::equal(w1.grad(), w2.grad())) << dtype_name(dt);
      if (bias) {
        EXPECT_TRUE(ops::equal(b1.grad(), b2.grad())) << dtype_name(dt);
      }
      // (x's gradient: NaN in row 2 on both sides, which equal() does not compare equal)
      EXPECT_TRUE(ops::equal(x1.grad().slice(0, 3, 9).contiguous(), x2.grad().slice(0, 3, 9).contiguous()));
    }
  }
  // It keeps one [N, out] tensor for backward where the composed form keeps two (the
  // pre-activation for ReLU's mask and the ReLU's output).
  Tensor x = randn({64, 32}, rng), w = randn({48, 32}, rng);
  auto kept = [&](bool fused) {
    Var xv(x, true), wv(w, true);
    const std::size_t before = allocator_live_bytes();
    Var y = fused ? linear_relu(xv, wv, Var()) : relu(linear(xv, wv, Var()));
    return allocator_live_bytes() - before;
  };
  EXPECT_EQ(kept(false) - kept(true), 64u * 48u * sizeof(float));
  expect_gradcheck("linear relu", [](auto& v) { return linear_relu(v[0], v[1], v[2]); },
                   {rnd({5, 4}), rnd({3, 4}), rnd({3})});
}

// ReLU then max pooling in one pass: the composed values and gradients bit for bit, with
// windows all negative (no gradient), ties at zero and NaN inputs among them.
TEST(Pooling, FusedReluMaxPoolIsTheComposedOneBitForBit) {
  Rng rng(4);
  for (DType dt : {DType::F32, DType::F64}) {
    for (auto [k, s] : {std::pair<std::int64_t, std::int64_t>{2, 2}, {3, 2}}) {
      Tensor x = randn({3, 4, 9, 9}, rng, -0.5, 1, dt);
      x.set({0, 0, 0, 0}, std::nan(""));
      x.set({1, 2, 4, 4}, 0.0);
      Var a(x, true), b(x, true);
      Var fused = relu_max_pool2d(a, k, s), composed = max_pool2d(relu(b), k, s);
      EXPECT_TRUE(ops::equal(fused.value(), composed.value())) << dtype_name(dt) << " k " << k;
      Tensor g = randn(fused.value().shape(), rng, 0, 1, dt);
      fused.backward(g);
      composed.backward(g);
      EXPECT_TRUE(ops::equal(a.grad(), b.grad())) << dtype_name(dt) << " k " << k;
    }
  }
}

// Layer norm over blocks of rows on the pool: float32 within rounding of float64, the same
// bits whatever the thread count, gamma's and beta's gradients included.
TEST(Sequence, LayerNormInBlocksOfRowsIsExactAndThreadIndependent) {
  Rng rng(8);
  Tensor x = randn({3, 50, 24}, rng, 1, 2), gm = randn({24}, rng), bt = randn({24}, rng), g = randn({3, 50, 24}, rng);
  auto run = [&](DType dt, int threads) {
    const int before = get_num_threads();
    set_num_threads(threads);
    Var xv(x.to(dt), true), gv(gm.to(dt), true), bv(bt.to(dt), true);
    Var y = layer_norm(xv, gv, bv);
    y.backward(g.to(dt));
    set_num_threads(before);
    return std::vector<Tensor>{y.value(), xv.grad(), gv.grad(), bv.grad()};
  };
  const auto one = run(DType::F32, 1), two = run(DType::F32, 2), ref = run(DType::F64, 2);
  for (std::size_t i = 0; i < one.size(); ++i) {
    EXPECT_TRUE(ops::equal(one[i], two[i])) << i;
    EXPECT_TRUE(ops::allclose(two[i].to(DType::F64), ref[i], 1e-4, 1e-5)) << i << " " << ops::max_abs_diff(two[i].to(DType::F64), ref[i]);
  }
  EXPECT_THROW(layer_norm(Var(x), Var(randn({5}, rng)), Var()), InternalError);
}

// GELU (tanh approximation) against its formula in long double, from -30 to 30 and at
// infinities and NaN: float within 3e-7 of the largest of |x| and 1, double within 1e-15.
TEST(Sequence, GeluIsTheTanhApproximation) {
  std::vector<double> xs{-std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
  for (double v = -30; v <= 30; v += 0.0625) xs.push_back(v);
  for (DType dt : {DType::F32, DType::F64}) {
    const Tensor x = Tensor::from_vector(xs, {static_cast<std::int64_t>(xs.size())}).to(dt);
    const Tensor y = gelu(Var(x)).value().to(DType::F64);
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const long double a = xs[i];
      const long double want = std::isinf(a) ? (a > 0 ? a : 0.0L)
                                             : 0.5L * a * (1 + std::tanh(std::sqrt(2.0L / M_PI) * (a + 0.044715L * a * a * a)));
      const double got = y.at({static_cast<std::int64_t>(i)});
      if (std::isinf(a) && a > 0) {
        EXPECT_TRUE(std::isinf(got) && got > 0);
        continue;
      }
      const double tol = (dt == DType::F32 ? 3e-7 : 1e-15) * std::max(1.0L, std::fabs(a));
      EXPECT_NEAR(got, static_cast<double>(want), tol) << dtype_name(dt) << " x " << xs[i];
    }
    EXPECT_TRUE(std::isnan(gelu(Var(Tensor::from_vector(std::vector<double>{std::nan("")}, {1}).to(dt))).value().at({0})));
  }
}

TEST(Sequence, LayerNormUsesThePopulationVariance) {
  // Seed 002 chapter 7's Add & Norm: (x - mean) / sqrt(variance), the variance over the n
  // features (divided by n, not n - 1), gamma 1, beta 0; the book's output
  // [1.40, -0.55, -0.87] has mean -0.0067 and variance 1.006 (the notes).
  Var x(Tensor::from_vector(std::vector<double>{1.40, -0.55, -0.87}, {1, 3}));
  Tensor y = layer_norm(x, Var(), Var(), 0.0).value();
  double mean = (1.40 - 0.55 - 0.87) / 3, var = 0;
  for (double v : {1.40, -0.55, -0.87}) var += (v - mean) * (v - mean) / 3;
  EXPECT_NEAR(y.at({0, 0}), (1.40 - mean) / std::sqrt(var), 1e-12);
  EXPECT_NEAR(y.at({0, 0}) + y.at({0, 1}) + y.at({0, 2}), 0.0, 1e-12);
  double sq = 0;
  for (std::int64_t k = 0; k < 3; ++k) sq += y.at({0, k}) * y.at({0, k}) / 3;
  EXPECT_NEAR(sq, 1.0, 1e-12);
  // Causal masking: a query never sees later keys.
  Var s(Tensor::zeros({1, 3, 3}, DType::F64));
  Tensor p = softmax(causal_mask(s)).value();
  EXPECT_DOUBLE_EQ(p.at({0, 0, 0}), 1.0);
  EXPECT_DOUBLE_EQ(p.at({0, 0, 1}), 0.0);
  EXPECT_DOUBLE_EQ(p.at({0, 2, 1}), 1.0 / 3);
  EXPECT_THROW(embedding(Var(Tensor::zeros({3, 2})), {3}), InternalError);
}

// Activation recomputation: the same gradients, for the input and for the parameters the
// recomputed function uses, with and without checkpointing.
TEST(Checkpoint, SameGradientsAsStoringActivations) {
  Rng rng(7);
  Tensor w0 = randn({6, 4}, rng), x0 = randn({3, 4}, rng);
  auto fn_of = [](const Var& w) {
    return [w](const Var& x) { return gelu(matmul(tanh(matmul(x, transpose(w, 0, 1))), w)); };
  };
  auto run = [&](bool recompute, Tensor& gx, Tensor& gw) {
    Var w(w0.clone(), true), x(x0.clone(), true);
    auto fn = fn_of(w);
    Var y = recompute ? checkpoint(fn, x) : fn(x);
    Var z = recompute ? checkpoint(fn, y) : fn(y);  // two checkpointed pieces in a row
    sum(mul(z, z)).backward();
    gx = x.grad();
    gw = w.grad();
  };
  Tensor gx0, gw0, gx1, gw1;
  run(false, gx0, gw0);
  run(true, gx1, gw1);
  for (std::int64_t i = 0; i < gx0.numel(); ++i) EXPECT_FLOAT_EQ(gx0.data<float>()[i], gx1.data<float>()[i]);
  for (std::int64_t i = 0; i < gw0.numel(); ++i) EXPECT_NEAR(gw0.data<float>()[i], gw1.data<float>()[i], 1e-5f);
  // Without gradients it is the plain function.
  NoGradGuard no_grad;
  Var w(w0, false);
  EXPECT_FALSE(checkpoint(fn_of(w), Var(x0)).requires_grad());
}

namespace {
// Causal self-attention composed of its parts: narrowed q, k, v, heads split into a batch,
// the products, the fused softmax, and the heads merged back side by side.
Var composed_attention(const Var& qkv, std::int64_t heads) {
  const std::int64_t B = qkv.size(0), T = qkv.size(1), d = qkv.size(2) / 3, hd = d / heads;
  auto split = [&](std::int64_t part) {
    return reshape(transpose(reshape(narrow(qkv, 2, part * d, d), {B, T, heads, hd}), 1, 2), {B * heads, T, hd});
  };
  Var w = causal_softmax(matmul(split(0), transpose(split(1), 1, 2)), 1.0 / std::sqrt(static_cast<double>(hd)));
  return reshape(transpose(reshape(matmul(w, split(2)), {B, heads, T, hd}), 1, 2), {B, T, d});
}
}  // namespace

// The fused attention reads each head's q, k, v in place and writes its output and
// gradients in place: the composed operations' values and gradients within rounding, in
// float32 and float64, for one head and several, contexts of 1 and 33.
TEST(Sequence, FusedSelfAttentionIsTheComposedOne) {
  Rng rng(5);
  for (DType dt : {DType::F32, DType::F64}) {
    for (auto [B, T, heads, hd] : {std::array<std::int64_t, 4>{3, 33, 4, 8}, {2, 1, 1, 16}, {1, 17, 3, 5}}) {
      Tensor x = randn({B, T, 3 * heads * hd}, rng, 0, 1, dt), g = randn({B, T, heads * hd}, rng, 0, 1, dt);
      Var a(x, true), b(x, true);
      Var fused = causal_self_attention(a, heads), composed = composed_attention(b, heads);
      const double rtol = dt == DType::F32 ? 1e-5 : 1e-12, atol = dt == DType::F32 ? 1e-6 : 1e-14;
      EXPECT_TRUE(ops::allclose(fused.value(), composed.value(), rtol, atol))
          << dtype_name(dt) << " T " << T << " " << ops::max_abs_diff(fused.value(), composed.value());
      fused.backward(g);
      composed.backward(g);
      EXPECT_TRUE(ops::allclose(a.grad(), b.grad(), rtol, atol))
          << dtype_name(dt) << " T " << T << " " << ops::max_abs_diff(a.grad(), b.grad());
    }
  }
  // A later query never sees an earlier one's future: changing the last position's q, k
  // and v leaves every earlier output as it was.
  Tensor x = randn({1, 6, 12}, rng, 0, 1);
  Tensor y = causal_self_attention(Var(x), 2).value();
  Tensor x2 = x.clone();
  for (std::int64_t c = 0; c < 12; ++c) x2.set({0, 5, c}, 7.0);
  Tensor y2 = causal_self_attention(Var(x2), 2).value();
  EXPECT_TRUE(ops::equal(y.slice(1, 0, 5).contiguous(), y2.slice(1, 0, 5).contiguous()));
  EXPECT_FALSE(ops::equal(y.slice(1, 5, 6).contiguous(), y2.slice(1, 5, 6).contiguous()));
  EXPECT_THROW(causal_self_attention(Var(randn({1, 4, 10}, rng)), 2), InternalError);
}

// Grouped-query attention is multi-head attention with each key-value head repeated for its
// group of query heads: the same output, and the repeated heads' gradients summed.
TEST(Sequence, GroupedQueryAttentionIsRepeatedKeysAndValues) {
  Rng rng(11);
  const std::int64_t B = 2, T = 9, H = 6, KV = 2, hd = 4, G = H / KV;
  for (std::int64_t window : {0, 3}) {
    Tensor x = randn({B, T, (H + 2 * KV) * hd}, rng, 0, 1, DType::F64), g = randn({B, T, H * hd}, rng, 0, 1, DType::F64);
    Tensor wide = Tensor::zeros({B, T, 3 * H * hd}, DType::F64);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t h = 0; h < H; ++h)
          for (std::int64_t e = 0; e < hd; ++e) {
            wide.set({b, t, h * hd + e}, x.at({b, t, h * hd + e}));
            wide.set({b, t, (H + h) * hd + e}, x.at({b, t, (H + h / G) * hd + e}));
            wide.set({b, t, (2 * H + h) * hd + e}, x.at({b, t, (H + KV + h / G) * hd + e}));
          }
    Var a(x, true), b(wide, true);
    Var grouped = causal_self_attention(a, H, KV, window), full = causal_self_attention(b, H, 0, window);
    EXPECT_TRUE(ops::allclose(grouped.value(), full.value(), 1e-12, 1e-14)) << window;
    grouped.backward(g);
    full.backward(g);
    for (std::int64_t bb = 0; bb < B; ++bb)
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t k = 0; k < KV; ++k)
          for (std::int64_t e = 0; e < hd; ++e) {
            double dk = 0, dv = 0;
            for (std::int64_t m = 0; m < G; ++m) {
              dk += b.grad().at({bb, t, (H + k * G + m) * hd + e});
              dv += b.grad().at({bb, t, (2 * H + k * G + m) * hd + e});
            }
            EXPECT_NEAR(a.grad().at({bb, t, (H + k) * hd + e}), dk, 1e-12);
            EXPECT_NEAR(a.grad().at({bb, t, (H + KV + k) * hd + e}), dv, 1e-12);
          }
  }
}

// A sliding window of w keys: a window as long as the sequence changes nothing; a window of
// one key gives each query its own value; with w = 3 a query's output does not depend on
// keys four or more places back.
TEST(Sequence, SlidingWindowAttentionSeesOnlyItsWindow) {
  Rng rng(12);
  const std::int64_t T = 7, H = 2, hd = 3;
  Tensor x = randn({1, T, 3 * H * hd}, rng, 0, 1, DType::F64);
  EXPECT_TRUE(ops::equal(causal_self_attention(Var(x), H, 0, T).value(), causal_self_attention(Var(x), H).value()));
  Tensor own = causal_self_attention(Var(x), H, 0, 1).value();
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t c = 0; c < H * hd; ++c) EXPECT_NEAR(own.at({0, t, c}), x.at({0, t, 2 * H * hd + c}), 1e-12);
  Tensor changed = x.clone();
  for (std::int64_t c = 0; c < 3 * H * hd; ++c) changed.set({0, 0, c}, 5.0);
  Tensor y = causal_self_attention(Var(x), H, 0, 3).value(), y2 = causal_self_attention(Var(changed), H, 0, 3).value();
  EXPECT_FALSE(ops::equal(y.slice(1, 2, 3).contiguous(), y2.slice(1, 2, 3).contiguous()));
  EXPECT_TRUE(ops::equal(y.slice(1, 3, T).contiguous(), y2.slice(1, 3, T).contiguous()));
  EXPECT_THROW(causal_self_attention(Var(randn({1, 4, 20}, rng)), 3, 2), InternalError);  // 3 heads, 2 groups
}

// Rotary embeddings turn each pair by position x frequency: position 0 is the identity, a
// pair's length is kept, the values after the rotated heads pass, and the dot product of a
// rotated query and key depends only on how far apart their positions are.
TEST(Sequence, RotaryEmbeddingsDependOnRelativePosition) {
  Rng rng(13);
  const std::vector<double> freq{1.0, 0.3, 0.01};
  Tensor q = randn({1, 6}, rng, 0, 1, DType::F64), k = randn({1, 6}, rng, 0, 1, DType::F64);
  auto at = [&](const Tensor& row, std::int32_t pos) { return rotary(Var(row), {pos}, 1, freq).value(); };
  EXPECT_TRUE(ops::allclose(at(q, 0), q, 0, 1e-15));
  auto dot = [](const Tensor& a, const Tensor& b) {
    double s = 0;
    for (std::int64_t i = 0; i < a.numel(); ++i) s += a.data<double>()[i] * b.data<double>()[i];
    return s;
  };
  EXPECT_NEAR(dot(at(q, 5), at(q, 5)), dot(q, q), 1e-12);
  EXPECT_NEAR(dot(at(q, 9), at(k, 4)), dot(at(q, 15), at(k, 10)), 1e-12);
  EXPECT_GT(std::abs(dot(at(q, 9), at(k, 4)) - dot(at(q, 9), at(k, 6))), 1e-6);
  Tensor rows = randn({2, 10}, rng, 0, 1, DType::F64);
  Tensor turned = rotary(Var(rows), {3, 4}, 1, freq).value();
  EXPECT_TRUE(ops::equal(turned.slice(1, 6, 10).contiguous(), rows.slice(1, 6, 10).contiguous()));
  EXPECT_THROW(rotary(Var(rows), {3}, 1, freq), InternalError);  // one position for two rows
}

// RMS normalization is layer normalization of an input whose mean is already zero.
TEST(Sequence, RmsNormIsLayerNormWithoutTheMean) {
  Rng rng(14);
  Tensor x = randn({4, 8}, rng, 0, 1, DType::F64), gamma = randn({8}, rng, 0, 1, DType::F64);
  for (std::int64_t r = 0; r < 4; ++r) {
    double m = 0;
    for (std::int64_t c = 0; c < 8; ++c) m += x.at({r, c}) / 8;
    for (std::int64_t c = 0; c < 8; ++c) x.set({r, c}, x.at({r, c}) - m);
  }
  EXPECT_TRUE(ops::allclose(rms_norm(Var(x), Var(gamma), 1e-5).value(), layer_norm(Var(x), Var(gamma), Var(), 1e-5).value(),
                            1e-12, 1e-12));
  Tensor y = rms_norm(Var(x), Var(), 0.0).value();
  for (std::int64_t r = 0; r < 4; ++r) {
    double ms = 0;
    for (std::int64_t c = 0; c < 8; ++c) ms += y.at({r, c}) * y.at({r, c}) / 8;
    EXPECT_NEAR(ms, 1.0, 1e-12);
  }
}
