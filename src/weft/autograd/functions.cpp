#include "weft/autograd/functions.h"

#include <cmath>

#include "weft/tensor/conv.h"
#include "weft/tensor/linalg.h"
#include "weft/tensor/ops.h"

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
  Tensor va = a.value(), vb = b.value();
  bool ga = a.requires_grad(), gb = b.requires_grad();
  return record("mul", ops::mul(va, vb), {a, b}, [va, vb, ga, gb](const Tensor& g) {
    return Grads{ga ? ops::sum_to_shape(ops::mul(g, vb), va.shape()) : Tensor(),
                 gb ? ops::sum_to_shape(ops::mul(g, va), vb.shape()) : Tensor()};
  });
}

Var div(const Var& a, const Var& b) {
  Tensor va = a.value(), vb = b.value();
  bool ga = a.requires_grad(), gb = b.requires_grad();
  return record("div", ops::div(va, vb), {a, b}, [va, vb, ga, gb](const Tensor& g) {
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
  return record("exp", y, {a}, [y](const Tensor& g) { return Grads{ops::mul(g, y)}; });
}

Var log(const Var& a) {
  Tensor x = a.value();
  return record("log", ops::log(x), {a}, [x](const Tensor& g) { return Grads{ops::div(g, x)}; });
}

Var relu(const Var& a) {
  Tensor x = a.value();
  return record("relu", ops::relu(x), {a}, [x](const Tensor& g) { return Grads{ops::relu_backward(g, x)}; });
}

Var sigmoid(const Var& a) {
  Tensor y = ops::sigmoid(a.value());
  return record("sigmoid", y, {a}, [y](const Tensor& g) { return Grads{ops::sigmoid_backward(g, y)}; });
}

Var tanh(const Var& a) {
  Tensor y = ops::tanh(a.value());
  return record("tanh", y, {a}, [y](const Tensor& g) { return Grads{ops::tanh_backward(g, y)}; });
}

Var matmul(const Var& a, const Var& b) {
  Tensor va = a.value(), vb = b.value();
  bool ga = a.requires_grad(), gb = b.requires_grad();
  return record("matmul", ops::matmul(va, vb), {a, b}, [va, vb, ga, gb](const Tensor& g) {
    Tensor da, db;
    if (va.dim() == 2 && vb.dim() == 2) {
      if (ga) da = ops::matmul(g, vb.t());
      if (gb) db = ops::matmul(va.t(), g);
    } else {
      // Batched: [B, M, K] x [B, K, N] (or [K, N] shared across the batch).
      if (ga) da = ops::matmul(g, vb.dim() == 3 ? vb.transpose(1, 2) : vb.t());
      if (gb) {
        if (vb.dim() == 2) {
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

Var linear(const Var& x, const Var& w, const Var& bias) {
  Tensor vx = x.value(), vw = w.value();
  bool gx = x.requires_grad(), gw = w.requires_grad();
  bool has_bias = bias.defined();
  bool gbias = has_bias && bias.requires_grad();
  Tensor out = ops::linear(vx, vw, has_bias ? &bias.value() : nullptr);
  std::vector<Var> inputs{x, w};
  if (has_bias) inputs.push_back(bias);
  return record("linear", out, inputs, [vx, vw, gx, gw, has_bias, gbias](const Tensor& g) {
    Grads grads(has_bias ? 3 : 2);
    if (gx) grads[0] = ops::matmul(g, vw);  // [N, out] x [out, in]
    if (gw) {
      grads[1] = Tensor::empty(vw.shape(), vw.dtype());
      ops::gemm(true, false, 1.0, g, vx, 0.0, grads[1]);  // [out, N] x [N, in]
    }
    if (gbias) grads[2] = ops::sum(g, {0}, false);
    return grads;
  });
}

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
  return record("softmax", y, {a}, [y](const Tensor& g) {
    // dx = y * (g - sum(g * y, last))
    Tensor gy = ops::mul(g, y);
    Tensor s = ops::sum(gy, {-1}, true);
    return Grads{ops::mul(y, ops::sub(g, s))};
  });
}

Var log_softmax(const Var& a) {
  Tensor y = ops::log_softmax(a.value());
  return record("log_softmax", y, {a}, [y](const Tensor& g) {
    // dx = g - softmax * sum(g, last)
    Tensor s = ops::sum(g, {-1}, true);
    return Grads{ops::sub(g, ops::mul(ops::exp(y), s))};
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
  return record("cross_entropy", Tensor::scalar(loss, z.dtype()), {logits}, [logp, targets, N, C](const Tensor& g) {
    // d loss / d logits = (softmax - onehot) / N
    Tensor d = ops::exp(logp);
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
  ops::Conv2dForward f = ops::conv2d(x.value(), w.value(), bias.defined() ? bias.value() : Tensor(),
                                     stride, padding);
  Shape xs = x.shape();
  Tensor vw = w.value();
  Tensor col = f.col;
  bool gx = x.requires_grad();
  bool has_bias = bias.defined();
  bool gb = has_bias && bias.requires_grad();
  std::vector<Var> inputs{x, w};
  if (has_bias) inputs.push_back(bias);
  return record("conv2d", f.out, inputs, [xs, vw, col, stride, padding, gx, has_bias, gb](const Tensor& g) {
    ops::Conv2dGrads r = ops::conv2d_backward(g, xs, vw, col, stride, padding, gx, gb);
    Grads grads{r.dx, r.dw};
    if (has_bias) grads.push_back(r.db);
    return grads;
  });
}

Var max_pool2d(const Var& x, std::int64_t kernel, std::int64_t stride) {
  ops::MaxPool2dForward f = ops::max_pool2d(x.value(), kernel, stride);
  Shape xs = x.shape();
  auto argmax = f.argmax;
  return record("max_pool2d", f.out, {x}, [xs, argmax](const Tensor& g) {
    return Grads{ops::max_pool2d_backward(g, *argmax, xs)};
  });
}

Var dropout(const Var& x, double p, Rng& rng) {
  WEFT_CHECK(p >= 0.0 && p < 1.0, "dropout probability must be in [0, 1)");
  if (p == 0.0) return x;
  Tensor mask = Tensor::empty(x.shape(), x.dtype());
  double keep_scale = 1.0 / (1.0 - p);
  dispatch(mask.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* m = mask.data<T>();
    for (std::int64_t i = 0; i < mask.numel(); ++i) m[i] = rng.uniform() < p ? T(0) : static_cast<T>(keep_scale);
  });
  return record("dropout", ops::mul(x.value(), mask), {x},
                [mask](const Tensor& g) { return Grads{ops::mul(g, mask)}; });
}

}  // namespace weft
