#include "weft/autograd/sequence.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "weft/tensor/fast_math.h"
#include "weft/tensor/ops.h"
#include "weft/tensor/thread_pool.h"

namespace weft {

using Grads = std::vector<Tensor>;

Var embedding(const Var& weight, const std::vector<std::int32_t>& ids) {
  const Tensor& w = weight.value();
  WEFT_CHECK(w.dim() == 2, "embedding: weight must be [V, d]");
  const std::int64_t V = w.size(0), d = w.size(1), n = static_cast<std::int64_t>(ids.size());
  for (auto id : ids) WEFT_CHECK(id >= 0 && id < V, "embedding: id " + std::to_string(id) + " outside the vocabulary");
  Tensor wc = w.contiguous();
  Tensor out = Tensor::empty({n, d}, w.dtype());
  dispatch(w.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* src = wc.data<T>();
    T* dst = out.data<T>();
    for (std::int64_t i = 0; i < n; ++i) std::copy(src + ids[i] * d, src + (ids[i] + 1) * d, dst + i * d);
  });
  Shape ws = w.shape();
  return record("embedding", out, {weight}, [ids, ws, d](const Tensor& g) {
    Tensor gw = Tensor::zeros(ws, g.dtype());
    Tensor gc = g.contiguous();
    dispatch(g.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const T* src = gc.data<T>();
      T* dst = gw.data<T>();
      for (std::size_t i = 0; i < ids.size(); ++i)
        for (std::int64_t k = 0; k < d; ++k) dst[ids[i] * d + k] += src[static_cast<std::int64_t>(i) * d + k];
    });
    return Grads{gw};
  });
}

Var layer_norm(const Var& x, const Var& gamma, const Var& beta, double eps) {
  Tensor xc = x.value().contiguous();
  const std::int64_t d = xc.size(-1), rows = d == 0 ? 0 : xc.numel() / d;
  Tensor xhat = Tensor::empty(xc.shape(), xc.dtype());
  Tensor rstd = Tensor::empty({rows}, xc.dtype());
  dispatch(xc.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* p = xc.data<T>();
    T* h = xhat.data<T>();
    T* r = rstd.data<T>();
    for (std::int64_t i = 0; i < rows; ++i) {
      const T* row = p + i * d;
      T mean = 0, var = 0;
      for (std::int64_t k = 0; k < d; ++k) mean += row[k];
      mean /= static_cast<T>(d);
      for (std::int64_t k = 0; k < d; ++k) var += (row[k] - mean) * (row[k] - mean);
      var /= static_cast<T>(d);
      r[i] = T(1) / std::sqrt(var + static_cast<T>(eps));
      for (std::int64_t k = 0; k < d; ++k) h[i * d + k] = (row[k] - mean) * r[i];
    }
  });
  Tensor out = xhat;
  const bool affine = gamma.defined();
  if (affine) out = ops::mul(xhat, gamma.value());
  if (beta.defined()) out = ops::add(out, beta.value());
  std::vector<Var> inputs{x};
  if (affine) inputs.push_back(gamma);
  if (beta.defined()) inputs.push_back(beta);
  SavedTensor saved_gamma = affine ? SavedTensor::input(gamma) : SavedTensor();
  const bool has_beta = beta.defined();
  SavedTensor saved_xhat = SavedTensor::activation(xhat);  // rstd, one value per row, stays fp32
  return record("layer_norm", out, inputs, [saved_xhat, rstd, saved_gamma, affine, has_beta, d, rows](const Tensor& g_in) {
    Tensor g = g_in.contiguous();
    Tensor xh = saved_xhat.get();
    Grads grads;
    // d xhat = g * gamma; dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
    Tensor dxhat = affine ? ops::mul(g, saved_gamma.get()) : g;
    Tensor dx = Tensor::empty(g.shape(), g.dtype());
    dispatch(g.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const T* dh = dxhat.data<T>();
      const T* h = xh.data<T>();
      const T* r = rstd.data<T>();
      T* o = dx.data<T>();
      for (std::int64_t i = 0; i < rows; ++i) {
        T m1 = 0, m2 = 0;
        for (std::int64_t k = 0; k < d; ++k) {
          m1 += dh[i * d + k];
          m2 += dh[i * d + k] * h[i * d + k];
        }
        m1 /= static_cast<T>(d);
        m2 /= static_cast<T>(d);
        for (std::int64_t k = 0; k < d; ++k) o[i * d + k] = r[i] * (dh[i * d + k] - m1 - h[i * d + k] * m2);
      }
    });
    grads.push_back(dx);
    std::vector<std::int64_t> lead;
    for (std::int64_t k = 0; k + 1 < g.dim(); ++k) lead.push_back(k);
    if (affine) grads.push_back(ops::sum(ops::mul(g, xh), lead, false));
    if (has_beta) grads.push_back(ops::sum(g, lead, false));
    return grads;
  });
}

Var gelu(const Var& x) {
  // The tanh approximation (GPT-2): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
  Tensor v = x.value().contiguous();
  Tensor out = Tensor::empty(v.shape(), v.dtype());
  const double c = std::sqrt(2.0 / M_PI);
  dispatch(v.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* p = v.data<T>();
    T* o = out.data<T>();
    parallel_for(v.numel(), 16384, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        T a = p[i];
        o[i] = T(0.5) * a * (T(1) + tanh_of(static_cast<T>(c) * (a + T(0.044715) * a * a * a)));
      }
    });
  });
  SavedTensor saved = SavedTensor::input(x);
  return record("gelu", out, {x}, [saved, c](const Tensor& g_in) {
    Tensor g = g_in.contiguous();
    Tensor xv = saved.get().contiguous();
    Tensor dx = Tensor::empty(xv.shape(), xv.dtype());
    dispatch(xv.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const T* p = xv.data<T>();
      const T* gp = g.data<T>();
      T* o = dx.data<T>();
      parallel_for(xv.numel(), 16384, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) {
          T a = p[i];
          T t = tanh_of(static_cast<T>(c) * (a + T(0.044715) * a * a * a));
          T du = static_cast<T>(c) * (T(1) + T(3 * 0.044715) * a * a);
          o[i] = gp[i] * (T(0.5) * (T(1) + t) + T(0.5) * a * (T(1) - t * t) * du);
        }
      });
    });
    return Grads{dx};
  });
}

Var causal_mask(const Var& scores) {
  Tensor out = scores.value().clone();
  WEFT_CHECK(out.dim() >= 2 && out.size(-1) == out.size(-2), "causal_mask: scores must be [..., T, T]");
  const std::int64_t T_ = out.size(-1), planes = T_ == 0 ? 0 : out.numel() / (T_ * T_);
  auto apply = [T_, planes](Tensor& t, double fill) {
    dispatch(t.dtype(), [&](auto zero) {
      using E = decltype(zero);
      E* p = t.data<E>();
      for (std::int64_t b = 0; b < planes; ++b)
        for (std::int64_t i = 0; i < T_; ++i)
          for (std::int64_t j = i + 1; j < T_; ++j) p[(b * T_ + i) * T_ + j] = static_cast<E>(fill);
    });
  };
  apply(out, -std::numeric_limits<double>::infinity());
  return record("causal_mask", out, {scores}, [apply](const Tensor& g) {
    Tensor d = g.clone();
    apply(d, 0.0);
    return Grads{d};
  });
}

Var causal_softmax(const Var& scores, double scale) {
  const Tensor x = scores.value().contiguous();
  WEFT_CHECK(x.dim() >= 2 && x.size(-1) == x.size(-2), "causal_softmax: scores must be [..., T, T]");
  const std::int64_t T_ = x.size(-1), rows = T_ == 0 ? 0 : x.numel() / T_;
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  const std::int64_t grain = std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(T_, 1));
  dispatch(x.dtype(), [&](auto zero) {
    using E = decltype(zero);
    const E* px = x.data<E>();
    E* py = y.data<E>();
    parallel_for(rows, grain, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t r = b; r < e; ++r) {
        // Row r is query i = r mod T: keys 0..i; the rest stay zero (softmax of -infinity).
        const std::int64_t n = r % T_ + 1;
        const E* in = px + r * T_;
        E* out = py + r * T_;
        for (std::int64_t j = 0; j < n; ++j) out[j] = static_cast<E>(in[j] * scale);  // as mul(x, scale)
        E m = *std::max_element(out, out + n);
        for (std::int64_t j = 0; j < n; ++j) out[j] = exp_of(out[j] - m);
        E sum = 0;
        for (std::int64_t j = 0; j < n; ++j) sum += out[j];
        const E inv = E(1) / sum;
        for (std::int64_t j = 0; j < n; ++j) out[j] *= inv;
        std::fill(out + n, out + T_, E(0));
      }
    });
  });
  SavedTensor sy = SavedTensor::activation(y);
  return record("causal_softmax", y, {scores}, [sy, scale, T_, rows, grain](const Tensor& g_in) {
    const Tensor g = g_in.contiguous(), yv = sy.get();
    Tensor dx = Tensor::empty(g.shape(), g.dtype());
    dispatch(g.dtype(), [&](auto zero) {
      using E = decltype(zero);
      const E* pg = g.data<E>();
      const E* pyv = yv.data<E>();
      E* pd = dx.data<E>();
      parallel_for(rows, grain, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t r = b; r < e; ++r) {
          const std::int64_t n = r % T_ + 1;
          const E* gr = pg + r * T_;
          const E* yr = pyv + r * T_;
          E* d = pd + r * T_;
          // softmax's backward y (g - sum(g y)), then the scale's: the masked keys add zeros.
          E s = 0;
          for (std::int64_t j = 0; j < n; ++j) s += gr[j] * yr[j];
          for (std::int64_t j = 0; j < n; ++j) d[j] = static_cast<E>(static_cast<E>(yr[j] * (gr[j] - s)) * scale);
          std::fill(d + n, d + T_, E(0));
        }
      });
    });
    return Grads{dx};
  });
}

Var narrow(const Var& x, std::int64_t dim, std::int64_t start, std::int64_t length) {
  const Tensor& v = x.value();
  dim = v.wrap_dim(dim);
  WEFT_CHECK(start >= 0 && length >= 0 && start + length <= v.size(dim), "narrow: range outside the dimension");
  Shape xs = v.shape();
  return record("narrow", v.slice(dim, start, start + length).contiguous(), {x}, [xs, dim, start, length](const Tensor& g) {
    Tensor dx = Tensor::zeros(xs, g.dtype());
    Tensor part = dx.slice(dim, start, start + length);
    part.copy_(g);
    return Grads{dx};
  });
}

Var concat(const std::vector<Var>& parts, std::int64_t dim) {
  WEFT_CHECK(!parts.empty(), "concat: nothing to concatenate");
  const Tensor& first = parts[0].value();
  dim = first.wrap_dim(dim);
  Shape shape = first.shape();
  std::vector<std::int64_t> sizes;
  std::int64_t total = 0;
  for (const auto& p : parts) {
    Shape s = p.shape();
    WEFT_CHECK(s.size() == shape.size(), "concat: ranks differ");
    for (std::size_t k = 0; k < s.size(); ++k)
      WEFT_CHECK(static_cast<std::int64_t>(k) == dim || s[k] == shape[k], "concat: shapes differ off the joined dimension");
    sizes.push_back(s[dim]);
    total += s[dim];
  }
  shape[dim] = total;
  Tensor out = Tensor::empty(shape, first.dtype());
  std::int64_t at = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    Tensor dst = out.slice(dim, at, at + sizes[i]);
    dst.copy_(parts[i].value());
    at += sizes[i];
  }
  return record("concat", out, parts, [sizes, dim](const Tensor& g) {
    Grads grads;
    std::int64_t off = 0;
    for (auto s : sizes) {
      grads.push_back(g.slice(dim, off, off + s).contiguous());
      off += s;
    }
    return grads;
  });
}

}  // namespace weft
