#include "weft/tensor/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "weft/tensor/fast_math.h"
#include "weft/tensor/fixed_sum.h"
#include "weft/tensor/strided.h"
#include "weft/tensor/thread_pool.h"

namespace weft::ops {

using detail::kElementwiseGrain;
using detail::strided_rows;

namespace {

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  WEFT_CHECK(a.defined() && b.defined(), std::string(op) + ": undefined tensor");
  WEFT_CHECK(a.dtype() == b.dtype(), std::string(op) + ": dtype mismatch (" + dtype_name(a.dtype()) +
                                         " vs " + dtype_name(b.dtype()) + ")");
}

template <class F>
Tensor map_unary(const Tensor& a, F f) {
  Tensor ac = a.contiguous();
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  dispatch(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* pa = ac.data<T>();
    T* po = out.data<T>();
    parallel_loop(out.numel(), kElementwiseGrain, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) po[i] = f(pa[i]);
    });
  });
  return out;
}

// out = f(a, b) with broadcasting.
template <class F>
Tensor map_binary(const Tensor& a, const Tensor& b, F f, const char* op) {
  check_same_dtype(a, b, op);
  if (a.shape() == b.shape() && a.is_contiguous() && b.is_contiguous()) {
    Tensor out = Tensor::empty(a.shape(), a.dtype());
    dispatch(a.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const T* pa = a.data<T>();
      const T* pb = b.data<T>();
      T* po = out.data<T>();
      parallel_loop(out.numel(), kElementwiseGrain, [&](std::int64_t s, std::int64_t e) {
        for (std::int64_t i = s; i < e; ++i) po[i] = f(pa[i], pb[i]);
      });
    });
    return out;
  }
  Shape shape = broadcast_shapes(a.shape(), b.shape());
  Tensor ea = a.expand(shape), eb = b.expand(shape);
  Tensor out = Tensor::empty(shape, a.dtype());
  dispatch(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* pa = ea.data<T>();
    const T* pb = eb.data<T>();
    T* po = out.data<T>();
    strided_rows<3>(shape, {out.strides(), ea.strides(), eb.strides()}, true,
                    [&](auto off, std::int64_t n, auto st) {
                      T* o = po + off[0];
                      const T* x = pa + off[1];
                      const T* y = pb + off[2];
                      for (std::int64_t i = 0; i < n; ++i) o[i] = f(x[i * st[1]], y[i * st[2]]);
                    });
  });
  return out;
}

}  // namespace

namespace {
// dst[i] = conv(src[i]) over two views of one shape.
template <class D, class S, class C>
void convert(Tensor& dst, const Tensor& s, C conv) {
  D* pd = dst.data<D>();
  const S* ps = s.data<S>();
  if (dst.is_contiguous() && s.is_contiguous()) {
    parallel_loop(dst.numel(), 1 << 16, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) pd[i] = conv(ps[i]);
    });
    return;
  }
  strided_rows<2>(dst.shape(), {dst.strides(), s.strides()}, true, [&](auto off, std::int64_t n, auto st) {
    for (std::int64_t i = 0; i < n; ++i) pd[off[0] + i * st[0]] = conv(ps[off[1] + i * st[1]]);
  });
}

// Copies where either side is bf16 (storage only: rounding in, widening out).
void copy_bf16(Tensor& dst, const Tensor& s) {
  if (dst.dtype() == DType::BF16 && s.dtype() == DType::BF16) {
    convert<bf16, bf16>(dst, s, [](bf16 h) { return h; });
  } else if (dst.dtype() == DType::BF16) {
    dispatch(s.dtype(), [&](auto zs) {
      using S = decltype(zs);
      convert<bf16, S>(dst, s, [](S x) { return to_bf16(static_cast<float>(x)); });
    });
  } else {
    dispatch(dst.dtype(), [&](auto zd) {
      using D = decltype(zd);
      convert<D, bf16>(dst, s, [](bf16 h) { return static_cast<D>(from_bf16(h)); });
    });
  }
}
}  // namespace

Tensor round_bf16(const Tensor& a) {
  WEFT_CHECK(a.dtype() == DType::F32, "round_bf16: needs an f32 tensor");
  Tensor out = Tensor::empty(a.shape(), DType::F32);
  convert<float, float>(out, a, [](float x) { return from_bf16(to_bf16(x)); });
  return out;
}

void copy_into(Tensor& dst, const Tensor& src) {
  WEFT_CHECK(dst.defined() && src.defined(), "copy: undefined tensor");
  Tensor s = src.expand(dst.shape());
  if (dst.dtype() == DType::BF16 || s.dtype() == DType::BF16) return copy_bf16(dst, s);
  dispatch(dst.dtype(), [&](auto zd) {
    using D = decltype(zd);
    dispatch(s.dtype(), [&](auto zs) {
      using S = decltype(zs);
      D* pd = dst.data<D>();
      const S* ps = s.data<S>();
      if (dst.is_contiguous() && s.is_contiguous()) {
        std::int64_t n = dst.numel();
        if constexpr (std::is_same_v<D, S>) {
          std::memcpy(pd, ps, static_cast<std::size_t>(n) * sizeof(D));
        } else {
          dispatched([&] {
            for (std::int64_t i = 0; i < n; ++i) pd[i] = static_cast<D>(ps[i]);
          });
        }
        return;
      }
      strided_rows<2>(dst.shape(), {dst.strides(), s.strides()}, true,
                      [&](auto off, std::int64_t n, auto st) {
                        for (std::int64_t i = 0; i < n; ++i)
                          pd[off[0] + i * st[0]] = static_cast<D>(ps[off[1] + i * st[1]]);
                      });
    });
  });
}

void fill(Tensor& t, double value) {
  dispatch(t.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T v = static_cast<T>(value);
    T* p = t.data<T>();
    if (t.is_contiguous()) {
      std::fill(p, p + t.numel(), v);
      return;
    }
    strided_rows<1>(t.shape(), {t.strides()}, false, [&](auto off, std::int64_t n, auto st) {
      for (std::int64_t i = 0; i < n; ++i) p[off[0] + i * st[0]] = v;
    });
  });
}

Tensor add(const Tensor& a, const Tensor& b) { return map_binary(a, b, [](auto x, auto y) { return x + y; }, "add"); }
Tensor sub(const Tensor& a, const Tensor& b) { return map_binary(a, b, [](auto x, auto y) { return x - y; }, "sub"); }
Tensor mul(const Tensor& a, const Tensor& b) { return map_binary(a, b, [](auto x, auto y) { return x * y; }, "mul"); }
Tensor div(const Tensor& a, const Tensor& b) { return map_binary(a, b, [](auto x, auto y) { return x / y; }, "div"); }

Tensor add(const Tensor& a, double s) {
  return map_unary(a, [s](auto x) { return static_cast<decltype(x)>(x + s); });
}
Tensor mul(const Tensor& a, double s) {
  return map_unary(a, [s](auto x) { return static_cast<decltype(x)>(x * s); });
}
Tensor neg(const Tensor& a) { return map_unary(a, [](auto x) { return -x; }); }
Tensor exp(const Tensor& a) { return map_unary(a, [](auto x) { return exp_of(x); }); }
Tensor log(const Tensor& a) { return map_unary(a, [](auto x) { return std::log(x); }); }
Tensor sqrt(const Tensor& a) { return map_unary(a, [](auto x) { return std::sqrt(x); }); }
Tensor square(const Tensor& a) { return map_unary(a, [](auto x) { return x * x; }); }
Tensor relu(const Tensor& a) {
  return map_unary(a, [](auto x) { return x > 0 ? x : decltype(x)(0); });
}
Tensor sigmoid(const Tensor& a) {
  return map_unary(a, [](auto x) {
    using T = decltype(x);
    // Stable for large |x|: never exponentiates a large positive number.
    if (x >= 0) return T(1) / (T(1) + exp_of(-x));
    T e = exp_of(x);
    return e / (T(1) + e);
  });
}
Tensor tanh(const Tensor& a) { return map_unary(a, [](auto x) { return tanh_of(x); }); }

Tensor relu_backward(const Tensor& grad, const Tensor& input) {
  return map_binary(grad, input, [](auto g, auto x) { return x > 0 ? g : decltype(g)(0); }, "relu_backward");
}
Tensor sigmoid_backward(const Tensor& grad, const Tensor& out) {
  return map_binary(grad, out, [](auto g, auto y) { return g * y * (decltype(y)(1) - y); }, "sigmoid_backward");
}
Tensor tanh_backward(const Tensor& grad, const Tensor& out) {
  return map_binary(grad, out, [](auto g, auto y) { return g * (decltype(y)(1) - y * y); }, "tanh_backward");
}

void add_(Tensor& a, const Tensor& b, double alpha) {
  check_same_dtype(a, b, "add_");
  Tensor eb = b.expand(a.shape());
  dispatch(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T al = static_cast<T>(alpha);
    T* pa = a.data<T>();
    const T* pb = eb.data<T>();
    if (a.is_contiguous() && eb.is_contiguous()) {
      parallel_loop(a.numel(), kElementwiseGrain, [&](std::int64_t s, std::int64_t e) {
        for (std::int64_t i = s; i < e; ++i) pa[i] += al * pb[i];
      });
      return;
    }
    strided_rows<2>(a.shape(), {a.strides(), eb.strides()}, false, [&](auto off, std::int64_t n, auto st) {
      for (std::int64_t i = 0; i < n; ++i) pa[off[0] + i * st[0]] += al * pb[off[1] + i * st[1]];
    });
  });
}

void relu_(Tensor& a) {
  dispatch(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* p = a.data<T>();
    strided_rows<1>(a.shape(), {a.strides()}, true, [&](auto off, std::int64_t n, auto st) {
      for (std::int64_t i = 0; i < n; ++i) p[off[0] + i * st[0]] = p[off[0] + i * st[0]] > 0 ? p[off[0] + i * st[0]] : T(0);
    });
  });
}

void mul_(Tensor& a, double s) {
  dispatch(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T v = static_cast<T>(s);
    T* p = a.data<T>();
    strided_rows<1>(a.shape(), {a.strides()}, false, [&](auto off, std::int64_t n, auto st) {
      for (std::int64_t i = 0; i < n; ++i) p[off[0] + i * st[0]] *= v;
    });
  });
}

Tensor sum(const Tensor& a) {
  std::vector<std::int64_t> dims(static_cast<size_t>(a.dim()));
  for (std::int64_t d = 0; d < a.dim(); ++d) dims[d] = d;
  return sum(a, dims, false);
}

Tensor sum(const Tensor& a, const std::vector<std::int64_t>& dims_in, bool keepdim) {
  std::vector<bool> reduce(static_cast<size_t>(a.dim()), false);
  for (auto d : dims_in) reduce[a.wrap_dim(d)] = true;
  Shape kept = a.shape();
  for (std::int64_t d = 0; d < a.dim(); ++d)
    if (reduce[d]) kept[d] = 1;
  Tensor out = Tensor::zeros(kept, a.dtype());
  // Output strides over the input's shape: 0 along reduced dims.
  Shape ostr = out.strides();
  for (std::int64_t d = 0; d < a.dim(); ++d)
    if (reduce[d]) ostr[d] = 0;
  dispatch(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* pa = a.data<T>();
    T* po = out.data<T>();
    strided_rows<2>(a.shape(), {ostr, a.strides()}, false, [&](auto off, std::int64_t n, auto st) {
      T* o = po + off[0];
      const T* x = pa + off[1];
      if (st[0] == 0) {
        T acc = *o;
        for (std::int64_t i = 0; i < n; ++i) acc += x[i * st[1]];
        *o = acc;
      } else {
        for (std::int64_t i = 0; i < n; ++i) o[i * st[0]] += x[i * st[1]];
      }
    });
  });
  if (keepdim) return out;
  Shape squeezed;
  for (std::int64_t d = 0; d < a.dim(); ++d)
    if (!reduce[d]) squeezed.push_back(a.shape()[d]);
  return out.view(squeezed);
}

Tensor mean(const Tensor& a) {
  Tensor s = sum(a);
  mul_(s, 1.0 / static_cast<double>(std::max<std::int64_t>(a.numel(), 1)));
  return s;
}

Tensor mean(const Tensor& a, const std::vector<std::int64_t>& dims, bool keepdim) {
  Tensor s = sum(a, dims, keepdim);
  std::int64_t n = a.numel() / std::max<std::int64_t>(s.numel(), 1);
  mul_(s, 1.0 / static_cast<double>(std::max<std::int64_t>(n, 1)));
  return s;
}

Tensor sum_to_shape(const Tensor& a, const Shape& shape) {
  if (a.shape() == shape) return a;
  std::int64_t lead = a.dim() - static_cast<std::int64_t>(shape.size());
  WEFT_CHECK(lead >= 0, "sum_to_shape: target has more dims");
  std::vector<std::int64_t> dims;
  for (std::int64_t d = 0; d < a.dim(); ++d) {
    if (d < lead || (shape[d - lead] == 1 && a.shape()[d] != 1)) dims.push_back(d);
  }
  Tensor s = sum(a, dims, true);
  return s.view(shape);
}

std::vector<std::int64_t> argmax_rows(const Tensor& a) {
  WEFT_CHECK(a.dim() == 2, "argmax_rows needs a 2-D tensor");
  Tensor c = a.contiguous();
  std::int64_t rows = c.size(0), cols = c.size(1);
  std::vector<std::int64_t> out(static_cast<size_t>(rows), 0);
  dispatch(c.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* p = c.data<T>();
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* row = p + r * cols;
      out[r] = std::max_element(row, row + cols) - row;
    }
  });
  return out;
}

namespace {
template <bool kLog>
Tensor softmax_impl(const Tensor& a) {
  WEFT_CHECK(a.dim() >= 1, "softmax of a 0-d tensor");
  Tensor c = a.contiguous();
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  std::int64_t cols = a.size(-1);
  std::int64_t rows = cols == 0 ? 0 : a.numel() / cols;
  dispatch(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* p = c.data<T>();
    T* o = out.data<T>();
    parallel_loop(rows, std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(cols, 1)),
                  [&](std::int64_t b, std::int64_t e) {
                    for (std::int64_t r = b; r < e; ++r) {
                      const T* x = p + r * cols;
                      T* y = o + r * cols;
                      T m = *std::max_element(x, x + cols);
                      // e^(x - max) into y (vectorized), then normalize.
                      T s = 0;
                      for (std::int64_t i = 0; i < cols; ++i) y[i] = exp_of(x[i] - m);
                      for (std::int64_t i = 0; i < cols; ++i) s += y[i];
                      if constexpr (kLog) {
                        T lse = m + std::log(s);
                        for (std::int64_t i = 0; i < cols; ++i) y[i] = x[i] - lse;
                      } else {
                        T inv = T(1) / s;
                        for (std::int64_t i = 0; i < cols; ++i) y[i] *= inv;
                      }
                    }
                  });
  });
  return out;
}
}  // namespace

Tensor softmax(const Tensor& a) { return softmax_impl<false>(a); }
Tensor log_softmax(const Tensor& a) { return softmax_impl<true>(a); }

double sum_of_squares(const Tensor& a) {
  double sum = 0;
  dispatch(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const Tensor c = a.contiguous();
    const T* d = c.data<T>();
    dispatched([&] {
      sum = sum8<double>(c.numel(), [d](std::int64_t i) { return static_cast<double>(d[i]) * static_cast<double>(d[i]); });
    });
  });
  return sum;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  WEFT_CHECK(a.shape() == b.shape(), "max_abs_diff: shapes differ " + shape_to_string(a.shape()) +
                                         " vs " + shape_to_string(b.shape()));
  auto va = a.to_vector(), vb = b.to_vector();
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    double d = std::fabs(va[i] - vb[i]);
    if (std::isnan(d)) return std::numeric_limits<double>::infinity();
    m = std::max(m, d);
  }
  return m;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  if (a.shape() != b.shape()) return false;
  auto va = a.to_vector(), vb = b.to_vector();
  for (size_t i = 0; i < va.size(); ++i) {
    if (!(std::fabs(va[i] - vb[i]) <= atol + rtol * std::fabs(vb[i]))) return false;
  }
  return true;
}

bool equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.raw_data(), cb.raw_data(), ca.nbytes()) == 0;
}

}  // namespace weft::ops
