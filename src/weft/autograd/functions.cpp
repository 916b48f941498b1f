#include "weft/autograd/functions.h"

#include <cmath>

#include "weft/tensor/conv.h"
#include "weft/tensor/linalg.h"
#include "weft/tensor/ops.h"
#include "weft/tensor/thread_pool.h"

namespace weft {

using Grads = std::vector<Tensor>;

Var add(const Var& a, const Var& b) {
  Shape sa = a.shape(), sb = b.shape();
  return record("add", ops::add(a.value(), b.value()), {a, b}, [sa, sb](const Tensor& g) {
    return Grads{ops::sum_to_shape(g, sa), ops::sum_to_shape(g, sb)};
  });
}

Var sub(const Var& a, const Var& b) {
  Shape sa = a.shape(), sb = b.shape();
  return record("sub", ops::sub(a.value(), b.value()), {a, b}, [sa, sb](const Tensor& g) {
    return Grads{ops::sum_to_shape(g, sa), ops::sum_to_shape(ops::neg(g), sb)};
  });
}

Var mul(const Var& a, const Var& b) {
  bool ga = a.requires_grad(), gb = b.requires_grad();
  // Each factor is needed only for the other's gradient.
  SavedTensor sa = gb ? SavedTensor::input(a) : SavedTensor(), sb = ga ? SavedTensor::input(b) : SavedTensor();
  Shape sha = a.shape(), shb = b.shape();
  return record("mul", ops::mul(a.value(), b.value()), {a, b}, [sa, sb, sha, shb, ga, gb](const Tensor& g) {
    return Grads{ga ? ops::sum_to_shape(ops::mul(g, sb.get()), sha) : Tensor(),
                 gb ? ops::sum_to_shape(ops::mul(g, sa.get()), shb) : Tensor()};
  });
}

Var div(const Var& a, const Var& b) {
  bool ga = a.requires_grad(), gb = b.requires_grad();
  SavedTensor sa = gb ? SavedTensor::input(a) : SavedTensor(), sb = SavedTensor::input(b);
  return record("div", ops::div(a.value(), b.value()), {a, b}, [sa, sb, ga, gb](const Tensor& g) {
    Tensor va = sa.get(), vb = sb.get();
    Tensor da, db;
    if (ga) da = ops::sum_to_shape(ops::div(g, vb), va.shape());
    if (gb) db = ops::sum_to_shape(ops::neg(ops::div(ops::mul(g, va), ops::mul(vb, vb))), vb.shape());
    return Grads{da, db};
  });
}

Var add(const Var& a, double s) {
  return record("add_scalar", ops::add(a.value(), s), {a}, [](const Tensor& g) { return Grads{g}; });
}

Var mul(const Var& a, double s) {
  return record("mul_scalar", ops::mul(a.value(), s), {a},
                [s](const Tensor& g) { return Grads{ops::mul(g, s)}; });
}

Var neg(const Var& a) {
  return record("neg", ops::neg(a.value()), {a}, [](const Tensor& g) { return Grads{ops::neg(g)}; });
}

Var exp(const Var& a) {
  Tensor y = ops::exp(a.value());
  SavedTensor sy = SavedTensor::activation(y);
  return record("exp", y, {a}, [sy](const Tensor& g) { return Grads{ops::mul(g, sy.get())}; });
}

Var log(const Var& a) {
  SavedTensor sx = SavedTensor::input(a);
  return record("log", ops::log(a.value()), {a}, [sx](const Tensor& g) { return Grads{ops::div(g, sx.get())}; });
}

Var relu(const Var& a) {
  SavedTensor sx = SavedTensor::input(a);  // only its sign is used: exact in bf16
  return record("relu", ops::relu(a.value()), {a},
                [sx](const Tensor& g) { return Grads{ops::relu_backward(g, sx.get())}; });
}

Var sigmoid(const Var& a) {
  Tensor y = ops::sigmoid(a.value());
  SavedTensor sy = SavedTensor::activation(y);
  return record("sigmoid", y, {a}, [sy](const Tensor& g) { return Grads{ops::sigmoid_backward(g, sy.get())}; });
}

Var tanh(const Var& a) {
  Tensor y = ops::tanh(a.value());
  SavedTensor sy = SavedTensor::activation(y);
  return record("tanh", y, {a}, [sy](const Tensor& g) { return Grads{ops::tanh_backward(g, sy.get())}; });
}

Var matmul(const Var& a, const Var& b) {
  bool ga = a.requires_grad(), gb = b.requires_grad();
  // Each operand is needed only for the other's gradient.
  SavedTensor sa = gb ? SavedTensor::product_operand(a) : SavedTensor();
  SavedTensor sb = ga ? SavedTensor::product_operand(b) : SavedTensor();
  const std::int64_t rank_a = a.dim(), rank_b = b.dim();
  Tensor out = rank_a == 2 && rank_b == 2
                   ? ops::matmul(gemm_operand(a.value(), a.size(0), b.size(1), a.size(1)),
                                 gemm_operand(b.value(), a.size(0), b.size(1), a.size(1)))
                   : ops::matmul(gemm_operand(a.value()), gemm_operand(b.value()));
  return record("matmul", out, {a, b}, [sa, sb, ga, gb, rank_a, rank_b](const Tensor& g) {
    Tensor va = gb ? sa.get() : Tensor(), vb = ga ? sb.get() : Tensor();
    Tensor da, db;
    if (rank_a == 2 && rank_b == 2) {
      if (ga) da = ops::matmul(g, vb.t());
      if (gb) db = ops::matmul(va.t(), g);
    } else {
      // Batched: [B, M, K] x [B, K, N] (or [K, N] shared across the batch).
      if (ga) da = ops::matmul(g, rank_b == 3 ? vb.transpose(1, 2) : vb.t());
      if (gb) {
        if (rank_b == 2) {
          Tensor a2 = va.reshape({-1, va.size(2)});
          Tensor g2 = g.reshape({-1, g.size(2)});
          db = ops::matmul(a2.t(), g2);
        } else {
          db = ops::matmul(va.transpose(1, 2), g);
        }
      }
    }
    return Grads{da, db};
  });
}

namespace {
// x w^T + bias, relu'd in place when `relu`; backward masks the incoming gradient with the
// output's sign (relu(x) > 0 exactly where x > 0, NaN included) before linear's gradients.
Var linear_maybe_relu(const Var& x, const Var& w, const Var& bias, bool relu) {
  bool gx = x.requires_grad(), gw = w.requires_grad();
  bool has_bias = bias.defined();
  bool gbias = has_bias && bias.requires_grad();
  const std::int64_t m = x.size(0), n = w.size(0), k = x.size(1);
  // On bf16 instructions the products read bf16 tensors as they are: the input's copy is the
  // one its SavedTensor keeps, and backward reads the kept copies and the incoming gradient
  // rounded once for both products (the same bits as rounding each operand per product).
  const bool native = x.dtype() == DType::F32 && ops::bf16_instructions_for(m, n, k);
  Tensor out = native ? ops::linear(bf16_operand(x), bf16_operand(w), has_bias ? &bias.value() : nullptr)
                      : ops::linear(gemm_operand(x.value(), m, n, k), gemm_operand(w.value(), m, n, k),
                                    has_bias ? &bias.value() : nullptr);
  if (relu) ops::relu_(out);
  // Each operand is needed only for the other's gradient; the output only for its sign.
  SavedTensor sx = gw ? SavedTensor::product_operand(x) : SavedTensor();
  SavedTensor sw = gx ? SavedTensor::product_operand(w) : SavedTensor();
  SavedTensor sy = relu ? SavedTensor::activation(out) : SavedTensor();
  std::vector<Var> inputs{x, w};
  if (has_bias) inputs.push_back(bias);
  return record(relu ? "linear_relu" : "linear", out, inputs, [sx, sw, sy, relu, native, m, n, k, gx, gw, has_bias, gbias](const Tensor& g_in) {
    const Tensor g = relu ? ops::relu_backward(g_in, sy.get()) : g_in;
    Grads grads(has_bias ? 3 : 2);
    // (as in forward, while this thread's products run on bf16 instructions)
    const bool bf16 = native && ops::bf16_instructions_for(m, n, k);
    const Tensor gb = bf16 ? g.to(DType::BF16) : g;
    if (gx) {  // [N, out] x [out, in]
      const Tensor vw = bf16 ? sw.get_bf16() : sw.get();
      grads[0] = Tensor::empty({g.size(0), vw.size(1)}, g.dtype());
      ops::gemm(false, false, 1.0, gb, vw, 0.0, grads[0]);
    }
    if (gw) {  // [out, N] x [N, in]
      const Tensor vx = bf16 ? sx.get_bf16() : sx.get();
      grads[1] = Tensor::empty({g.size(1), vx.size(1)}, g.dtype());
      ops::gemm(true, false, 1.0, gb, vx, 0.0, grads[1]);
    }
    if (gbias) grads[2] = ops::sum(g, {0}, false);
    return grads;
  });
}
}  // namespace

Var linear(const Var& x, const Var& w, const Var& bias) { return linear_maybe_relu(x, w, bias, false); }
Var linear_relu(const Var& x, const Var& w, const Var& bias) { return linear_maybe_relu(x, w, bias, true); }

Var sum(const Var& a) {
  Shape s = a.shape();
  return record("sum", ops::sum(a.value()), {a},
                [s](const Tensor& g) { return Grads{g.expand(s).contiguous()}; });
}

Var sum(const Var& a, const std::vector<std::int64_t>& dims, bool keepdim) {
  Shape s = a.shape();
  Tensor kept = ops::sum(a.value(), dims, true);
  Shape kept_shape = kept.shape();
  Tensor out = keepdim ? kept : ops::sum(a.value(), dims, false);
  return record("sum_dims", out, {a}, [s, kept_shape](const Tensor& g) {
    return Grads{g.reshape(kept_shape).expand(s).contiguous()};
  });
}

Var mean(const Var& a) {
  Shape s = a.shape();
  double inv = 1.0 / static_cast<double>(std::max<std::int64_t>(a.value().numel(), 1));
  return record("mean", ops::mean(a.value()), {a}, [s, inv](const Tensor& g) {
    return Grads{ops::mul(g.expand(s).contiguous(), inv)};
  });
}

Var reshape(const Var& a, const Shape& shape) {
  Shape s = a.shape();
  return record("reshape", a.value().reshape(shape), {a},
                [s](const Tensor& g) { return Grads{g.reshape(s)}; });
}

Var flatten(const Var& a, std::int64_t start_dim) {
  Shape s = a.shape();
  return record("flatten", a.value().flatten(start_dim), {a},
                [s](const Tensor& g) { return Grads{g.reshape(s)}; });
}

Var transpose(const Var& a, std::int64_t d0, std::int64_t d1) {
  return record("transpose", a.value().transpose(d0, d1).contiguous(), {a},
                [d0, d1](const Tensor& g) { return Grads{g.transpose(d0, d1).contiguous()}; });
}

Var softmax(const Var& a) {
  Tensor y = ops::softmax(a.value());
  SavedTensor sy = SavedTensor::activation(y);
  return record("softmax", y, {a}, [sy](const Tensor& g) {
    // dx = y * (g - sum(g * y, last))
    Tensor yv = sy.get();
    Tensor gy = ops::mul(g, yv);
    Tensor s = ops::sum(gy, {-1}, true);
    return Grads{ops::mul(yv, ops::sub(g, s))};
  });
}

Var log_softmax(const Var& a) {
  Tensor y = ops::log_softmax(a.value());
  SavedTensor sy = SavedTensor::activation(y);
  return record("log_softmax", y, {a}, [sy](const Tensor& g) {
    // dx = g - softmax * sum(g, last)
    Tensor s = ops::sum(g, {-1}, true);
    return Grads{ops::sub(g, ops::mul(ops::exp(sy.get()), s))};
  });
}

Var cross_entropy(const Var& logits, const std::vector<std::int32_t>& targets) {
  const Tensor& z = logits.value();
  WEFT_CHECK(z.dim() == 2, "cross_entropy: logits must be [N, C], got " + shape_to_string(z.shape()));
  const std::int64_t N = z.size(0), C = z.size(1);
  WEFT_CHECK(static_cast<std::int64_t>(targets.size()) == N,
             "cross_entropy: " + std::to_string(targets.size()) + " targets for " + std::to_string(N) + " rows");
  for (auto t : targets) WEFT_CHECK(t >= 0 && t < C, "cross_entropy: target " + std::to_string(t) + " out of range");
  Tensor logp = ops::log_softmax(z);
  double loss = 0;
  dispatch(z.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* p = logp.data<T>();
    for (std::int64_t i = 0; i < N; ++i) loss -= static_cast<double>(p[i * C + targets[i]]);
  });
  loss /= static_cast<double>(std::max<std::int64_t>(N, 1));
  SavedTensor saved = SavedTensor::activation(logp);
  return record("cross_entropy", Tensor::scalar(loss, z.dtype()), {logits}, [saved, targets, N, C](const Tensor& g) {
    // d loss / d logits = (softmax - onehot) / N
    Tensor d = ops::exp(saved.get());
    dispatch(d.dtype(), [&](auto zero) {
      using T = decltype(zero);
      T* p = d.data<T>();
      T scale = static_cast<T>(g.item() / static_cast<double>(N));
      for (std::int64_t i = 0; i < N; ++i) p[i * C + targets[i]] -= T(1);
      for (std::int64_t i = 0; i < N * C; ++i) p[i] *= scale;
    });
    return Grads{d};
  });
}

Var mse_loss(const Var& pred, const Var& target) {
  Var diff = sub(pred, target);
  return mean(mul(diff, diff));
}

Var half_mse_loss(const Var& pred, const Var& target) { return mul(mse_loss(pred, target), 0.5); }

Var conv2d(const Var& x, const Var& w, const Var& bias, std::int64_t stride, std::int64_t padding) {
  ops::Conv2dForward f = ops::conv2d(gemm_operand(x.value()), gemm_operand(w.value()),
                                     bias.defined() ? bias.value() : Tensor(), stride, padding);
  Shape xs = x.shape();
  SavedTensor sw = SavedTensor::product_operand(w);
  // The input (or its unfolded matrix), for the weights' gradient.
  SavedTensor saved = SavedTensor::activation(f.saved);
  const bool saved_is_col = f.saved_is_col;
  bool gx = x.requires_grad();
  bool has_bias = bias.defined();
  bool gb = has_bias && bias.requires_grad();
  std::vector<Var> inputs{x, w};
  if (has_bias) inputs.push_back(bias);
  return record("conv2d", f.out, inputs, [xs, sw, saved, saved_is_col, stride, padding, gx, has_bias,
                                                 gb](const Tensor& g) {
    ops::Conv2dGrads r = ops::conv2d_backward(g, xs, sw.get(), saved.get(), saved_is_col, stride, padding, gx, gb);
    Grads grads{r.dx, r.dw};
    if (has_bias) grads.push_back(r.db);
    return grads;
  });
}

namespace {
Var pool(const Var& x, std::int64_t kernel, std::int64_t stride, bool relu) {
  ops::MaxPool2dForward f = ops::max_pool2d(x.value(), kernel, stride, relu, grad_enabled());
  Shape xs = x.shape();
  auto argmax = f.argmax;
  return record(relu ? "relu_max_pool2d" : "max_pool2d", f.out, {x}, [xs, argmax](const Tensor& g) {
    return Grads{ops::max_pool2d_backward(g, *argmax, xs)};
  });
}
}  // namespace

Var max_pool2d(const Var& x, std::int64_t kernel, std::int64_t stride) { return pool(x, kernel, stride, false); }
Var relu_max_pool2d(const Var& x, std::int64_t kernel, std::int64_t stride) { return pool(x, kernel, stride, true); }

Var dropout(const Var& x, double p, Rng& rng) {
  WEFT_CHECK(p >= 0.0 && p < 1.0, "dropout probability must be in [0, 1)");
  if (p == 0.0) return x;
  const Tensor v = x.value().contiguous();
  const std::int64_t n = v.numel();
  // One byte a value for backward (a float mask took four), drawn in order from rng.
  auto keep = std::make_shared<std::vector<std::uint8_t>>(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) (*keep)[static_cast<std::size_t>(i)] = rng.uniform() < p ? 0 : 1;
  const double keep_scale = 1.0 / (1.0 - p);
  // x * keep_scale where kept, x * 0 elsewhere (NaN and infinities stay NaN, as x * mask did).
  auto apply = [keep, keep_scale](const Tensor& in) {
    Tensor out = Tensor::empty(in.shape(), in.dtype());
    dispatch(in.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const T* a = in.data<T>();
      T* o = out.data<T>();
      const std::uint8_t* k = keep->data();
      const T scale = static_cast<T>(keep_scale);
      parallel_loop(in.numel(), 16384, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) o[i] = a[i] * (k[i] ? scale : T(0));
      });
    });
    return out;
  };
  return record("dropout", apply(v), {x}, [apply](const Tensor& g) { return Grads{apply(g.contiguous())}; });
}

}  // namespace weft
