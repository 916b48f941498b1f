#include "weft/autograd/sequence.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "weft/tensor/fast_math.h"
#include "weft/tensor/fixed_sum.h"
#include "weft/tensor/kernel_table.h"
#include "weft/tensor/linalg.h"
#include "weft/tensor/ops.h"
#include "weft/tensor/profile.h"
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

namespace {
constexpr std::int64_t kNormRowBlock = 64;  // rows per task; also the blocks gamma's and beta's gradients are summed in

// fn(data) with t's values as stored: bf16 (a kept copy) or T.
template <class T, class Fn>
void with_stored(const Tensor& t, const Fn& fn) {
  if (t.dtype() == DType::BF16) {
    fn(t.data<bf16>());
  } else {
    fn(t.data<T>());
  }
}

// A value as float or double, from float, double or bf16 storage.
template <class T, class S>
T widen_as(S v) {
  if constexpr (std::is_same_v<S, bf16>) {
    return static_cast<T>(from_bf16(v));
  } else {
    return static_cast<T>(v);
  }
}
}  // namespace

namespace {
// Layer normalization (centered: the mean taken off first) or RMS normalization (not: the
// root mean square only), one pass per row each way.
Var normalize(const Var& x, const Var& gamma, const Var& beta, double eps, bool centered) {
  Tensor xc = x.value().contiguous();
  const std::int64_t d = xc.size(-1), rows = d == 0 ? 0 : xc.numel() / d;
  const bool affine = gamma.defined(), has_beta = beta.defined();
  WEFT_CHECK((!affine || gamma.value().numel() == d) && (!has_beta || beta.value().numel() == d),
             "layer_norm: gamma and beta must have the last dimension's size");
  Tensor xhat = Tensor::empty(xc.shape(), xc.dtype()), out = Tensor::empty(xc.shape(), xc.dtype());
  Tensor rstd = Tensor::empty({rows}, xc.dtype());
  // Under mixed precision xhat (kept for backward) and the output (the next product's
  // operand) are rounded to bf16 in the same pass.
  const bool pack = keeps_bf16(xc);
  Tensor xhat16 = pack ? Tensor::empty(xc.shape(), DType::BF16) : Tensor();
  Tensor out16 = pack ? Tensor::empty(xc.shape(), DType::BF16) : Tensor();
  const Tensor gv = affine ? gamma.value().contiguous() : Tensor(), bv = has_beta ? beta.value().contiguous() : Tensor();
  dispatch(xc.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* p = xc.data<T>();
    const T* gp = affine ? gv.data<T>() : nullptr;
    const T* bp = has_beta ? bv.data<T>() : nullptr;
    T* h = xhat.data<T>();
    T* o = out.data<T>();
    T* r = rstd.data<T>();
    bf16* h16 = pack ? xhat16.data<bf16>() : nullptr;
    bf16* o16 = pack ? out16.data<bf16>() : nullptr;
    parallel_loop(rows, kNormRowBlock, [&](std::int64_t first, std::int64_t last) {
      for (std::int64_t i = first; i < last; ++i) {
        const T* row = p + i * d;
        const T mean = centered ? sum8<T>(d, [&](std::int64_t k) { return row[k]; }) / static_cast<T>(d) : T(0);
        const T var = sum8<T>(d, [&](std::int64_t k) { return (row[k] - mean) * (row[k] - mean); }) / static_cast<T>(d);
        const T rs = T(1) / std::sqrt(var + static_cast<T>(eps));
        r[i] = rs;
        T* hi = h + i * d;
        T* oi = o + i * d;
        for (std::int64_t k = 0; k < d; ++k) hi[k] = (row[k] - mean) * rs;
        if (affine && has_beta) {
          for (std::int64_t k = 0; k < d; ++k) oi[k] = hi[k] * gp[k] + bp[k];
        } else if (affine) {
          for (std::int64_t k = 0; k < d; ++k) oi[k] = hi[k] * gp[k];
        } else if (has_beta) {
          for (std::int64_t k = 0; k < d; ++k) oi[k] = hi[k] + bp[k];
        } else {
          std::copy(hi, hi + d, oi);
        }
        if constexpr (std::is_same_v<T, float>) {
          if (h16 != nullptr)
            for (std::int64_t k = 0; k < d; ++k) {
              h16[i * d + k] = to_bf16(h[i * d + k]);
              o16[i * d + k] = to_bf16(o[i * d + k]);
            }
        }
      }
    });
  });
  if (pack) {
    remember_bf16_copy(xhat, xhat16);
    remember_bf16_copy(out, out16);
  }
  std::vector<Var> inputs{x};
  if (affine) inputs.push_back(gamma);
  if (has_beta) inputs.push_back(beta);
  SavedTensor saved_gamma = affine ? SavedTensor::input(gamma) : SavedTensor();
  SavedTensor saved_xhat = SavedTensor::activation(xhat);  // rstd, one value per row, stays fp32
  return record(centered ? "layer_norm" : "rms_norm", out, inputs,
                [saved_xhat, rstd, saved_gamma, affine, has_beta, centered, d, rows](const Tensor& g_in) {
    const Tensor g = g_in.contiguous();
    const Tensor xh = saved_xhat.stored_bf16() ? saved_xhat.get_bf16() : saved_xhat.get().contiguous();
    const Tensor gam = affine ? saved_gamma.get().contiguous() : Tensor();
    Tensor dx = Tensor::empty(g.shape(), g.dtype());
    // gamma's and beta's gradients: sums over the rows, per block of rows, then the blocks in order.
    const std::int64_t blocks = (rows + kNormRowBlock - 1) / kNormRowBlock;
    Tensor parts = Tensor::zeros({2, std::max<std::int64_t>(blocks, 1), d}, g.dtype());
    dispatch(g.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const T* gp = g.data<T>();
      const T* gm = affine ? gam.data<T>() : nullptr;
      const T* r = rstd.data<T>();
      T* o = dx.data<T>();
      T* pg = parts.data<T>();
      T* pb = pg + std::max<std::int64_t>(blocks, 1) * d;
      auto run = [&](const auto* h) {
        parallel_loop(blocks, 1, [&](std::int64_t b0, std::int64_t b1) {
          for (std::int64_t b = b0; b < b1; ++b) {
            std::vector<T> dh(static_cast<std::size_t>(d)), hk(static_cast<std::size_t>(d));
            T* pgb = pg + b * d;
            T* pbb = pb + b * d;
            for (std::int64_t i = b * kNormRowBlock; i < std::min(rows, (b + 1) * kNormRowBlock); ++i) {
              // d xhat = g gamma; dx = rstd (d xhat - mean(d xhat) - xhat mean(d xhat xhat)),
              // without mean(d xhat) when not centered
              const T* gi = gp + i * d;
              for (std::int64_t k = 0; k < d; ++k) hk[k] = widen_as<T>(h[i * d + k]);
              if (gm) {
                for (std::int64_t k = 0; k < d; ++k) dh[k] = gi[k] * gm[k];
              } else {
                std::copy(gi, gi + d, dh.begin());
              }
              for (std::int64_t k = 0; k < d; ++k) {
                pgb[k] += gi[k] * hk[k];
                pbb[k] += gi[k];
              }
              const T m1 = centered ? sum8<T>(d, [&](std::int64_t k) { return dh[k]; }) / static_cast<T>(d) : T(0);
              const T m2 = sum8<T>(d, [&](std::int64_t k) { return dh[k] * hk[k]; }) / static_cast<T>(d);
              T* oi = o + i * d;
              for (std::int64_t k = 0; k < d; ++k) oi[k] = r[i] * (dh[k] - m1 - hk[k] * m2);
            }
          }
        });
      };
      with_stored<T>(xh, run);
    });
    Grads grads{dx};
    if (affine) grads.push_back(ops::sum(parts.select(0, 0), {0}, false));
    if (has_beta) grads.push_back(ops::sum(parts.select(0, 1), {0}, false));
    return grads;
  });
}
}  // namespace

Var layer_norm(const Var& x, const Var& gamma, const Var& beta, double eps) {
  return normalize(x, gamma, beta, eps, true);
}

Var rms_norm(const Var& x, const Var& gamma, double eps) { return normalize(x, gamma, Var(), eps, false); }

namespace {
// GELU's gate (1 + tanh(u)) / 2 with u = c (a + 0.044715 a^3), as the logistic function
// 1 / (1 + e^(-2u)) (the same value: one exponential and one division): GELU(a) = a gate;
// its derivative gate + 2 a gate (1 - gate) du/da.
//
// The gates of n <= kGateBlock elements of p (widened to T), in three passes (the exponent,
// the exponential, the gate): the same operations on each element as one pass, in loops short
// enough that the processor overlaps many elements' exponentials (in one loop of the whole
// gate it waited on each element's chain of dependent operations: 1.2 ns an element against
// 0.83 so, on the Zen 5; bench/README.md, session 79).
constexpr std::int64_t kGateBlock = 256;
template <class T, class S>
void gelu_gates(const S* p, std::int64_t n, T c, T* gate) {
  for (std::int64_t j = 0; j < n; ++j) {
    const T a = widen_as<T>(p[j]);
    gate[j] = T(-2) * c * (a + T(0.044715) * a * a * a);
  }
  for (std::int64_t j = 0; j < n; ++j) gate[j] = exp_of(gate[j]);
  for (std::int64_t j = 0; j < n; ++j) gate[j] = T(1) / (T(1) + gate[j]);
}

// GELU's loops (forward and backward) in chunks of at least this many elements: an
// exponential and a division each, so smaller than the element-wise ops' 32,768. A decoding
// step of 16 streams has 16 x 3,072 of them a layer: in 3 chunks at 16,384 (two for one
// thread, one for the other: GELU was 4.4% of the step), in 8 at 4,096. The step alone
// (GPT-2 small body, int8 weights), 8 alternated runs: medians 2,980 and 3,011 tokens/s.
constexpr std::int64_t kGeluGrain = 4096;
}  // namespace

Var gelu(const Var& x) {
  // The tanh approximation (GPT-2): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
  Tensor v = x.value().contiguous();
  Tensor out = Tensor::empty(v.shape(), v.dtype());
  const double c = std::sqrt(2.0 / M_PI);
  // Under mixed precision the input (kept for backward) and the output (the next product's
  // operand) are stored as bf16: rounded here, in the same pass, instead of in two more.
  const bool pack = keeps_bf16(v) && !x.is_leaf();
  Tensor vb = pack ? Tensor::empty(v.shape(), DType::BF16) : Tensor();
  Tensor ob = pack ? Tensor::empty(v.shape(), DType::BF16) : Tensor();
  dispatch(v.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* p = v.data<T>();
    T* o = out.data<T>();
    auto run = [&](auto keep) {
      parallel_loop(v.numel(), kGeluGrain, [&](std::int64_t b, std::int64_t e) {
        T gate[kGateBlock];
        for (std::int64_t b0 = b; b0 < e; b0 += kGateBlock) {
          const std::int64_t n = std::min(kGateBlock, e - b0);
          gelu_gates(p + b0, n, static_cast<T>(c), gate);
          for (std::int64_t j = 0; j < n; ++j) {
            const std::int64_t i = b0 + j;
            const T a = p[i];
            o[i] = gate[j] == T(0) ? T(0) : a * gate[j];  // (GELU(-inf) = 0, not -inf x 0)
            keep(i, a, o[i]);
          }
        }
      });
    };
    if constexpr (std::is_same_v<T, float>) {
      if (pack) {
        bf16* in16 = vb.data<bf16>();
        bf16* out16 = ob.data<bf16>();
        run([&](std::int64_t i, float a, float y) {
          in16[i] = to_bf16(a);
          out16[i] = to_bf16(y);
        });
        return;
      }
    }
    run([](std::int64_t, T, T) {});
  });
  if (pack) {
    if (v.storage() == x.value().storage()) remember_bf16_copy(v, vb);
    remember_bf16_copy(out, ob);
  }
  SavedTensor saved = SavedTensor::input(x);
  return record("gelu", out, {x}, [saved, c](const Tensor& g_in) {
    Tensor g = g_in.contiguous();
    // A bf16-stored input is widened as it is read (one pass, not two).
    const Tensor xv = saved.stored_bf16() ? saved.get_bf16().contiguous() : saved.get().contiguous();
    Tensor dx = Tensor::empty(xv.shape(), g.dtype());
    dispatch(g.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const T* gp = g.data<T>();
      T* o = dx.data<T>();
      with_stored<T>(xv, [&](const auto* p) {
        parallel_loop(xv.numel(), kGeluGrain, [&](std::int64_t b, std::int64_t e) {
          T gate[kGateBlock];
          const T ct = static_cast<T>(c);
          for (std::int64_t b0 = b; b0 < e; b0 += kGateBlock) {
            const std::int64_t n = std::min(kGateBlock, e - b0);
            gelu_gates(p + b0, n, ct, gate);
            for (std::int64_t j = 0; j < n; ++j) {
              const std::int64_t i = b0 + j;
              const T a = widen_as<T>(p[i]), sg = gate[j];
              const T du = ct * (T(1) + T(3 * 0.044715) * a * a);
              o[i] = gp[i] * (sg + T(2) * a * sg * (T(1) - sg) * du);
            }
          }
        });
      });
    });
    return Grads{dx};
  });
}

Var swiglu(const Var& x) {
  const Tensor v = x.value().contiguous();
  const std::int64_t w = v.dim() == 0 ? 0 : v.size(-1), f = w / 2, rows = w == 0 ? 0 : v.numel() / w;
  WEFT_CHECK(v.dim() >= 1 && w % 2 == 0, "swiglu: the last dimension must hold the gate and the up halves");
  Shape shape = v.shape();
  shape.back() = f;
  Tensor out = Tensor::empty(shape, v.dtype());
  const std::int64_t grain = std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(w, 1));  // rows per task
  dispatch(v.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* p = v.data<T>();
    T* o = out.data<T>();
    parallel_loop(rows, grain, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t r = b; r < e; ++r)
        for (std::int64_t k = 0; k < f; ++k) {
          const T a = p[r * w + k], s = T(1) / (T(1) + exp_of(-a));
          o[r * f + k] = a * s * p[r * w + f + k];  // SiLU(gate) x up
        }
    });
  });
  SavedTensor saved = SavedTensor::input(x);
  return record("swiglu", out, {x}, [saved, w, f, rows, grain](const Tensor& g_in) {
    const Tensor g = g_in.contiguous(), xv = saved.get().contiguous();
    Tensor dx = Tensor::empty(xv.shape(), g.dtype());
    dispatch(g.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const T* gp = g.data<T>();
      const T* p = xv.data<T>();
      T* o = dx.data<T>();
      parallel_loop(rows, grain, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t r = b; r < e; ++r)
          for (std::int64_t k = 0; k < f; ++k) {
            const T a = p[r * w + k], up = p[r * w + f + k], s = T(1) / (T(1) + exp_of(-a)), gk = gp[r * f + k];
            o[r * w + k] = gk * up * s * (T(1) + a * (T(1) - s));  // d SiLU(a) = s (1 + a (1 - s))
            o[r * w + f + k] = gk * a * s;
          }
      });
    });
    return Grads{dx};
  });
}

Var rotary(const Var& rows, const std::vector<std::int32_t>& positions, std::int64_t heads,
           const std::vector<double>& inverse_frequencies) {
  const Tensor v = rows.value().contiguous();
  const auto half = static_cast<std::int64_t>(inverse_frequencies.size()), hd = 2 * half;
  const std::int64_t n = v.dim() == 2 ? v.size(0) : 0, w = v.dim() == 2 ? v.size(1) : 0;
  WEFT_CHECK(v.dim() == 2 && half >= 1 && static_cast<std::int64_t>(positions.size()) == n && heads >= 0 &&
                 heads * hd <= w,
             "rotary: rows must be [N, width] with a position each and `heads` heads of the frequencies' size");
  // cos and sin of each row's angles, [N, half] each, in double (then the tensor's type).
  std::vector<double> cs(static_cast<std::size_t>(2 * n * half));
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t j = 0; j < half; ++j) {
      const double angle = positions[static_cast<std::size_t>(r)] * inverse_frequencies[static_cast<std::size_t>(j)];
      cs[static_cast<std::size_t>(2 * (r * half + j))] = std::cos(angle);
      cs[static_cast<std::size_t>(2 * (r * half + j) + 1)] = std::sin(angle);
    }
  // Each head's pairs (j, j + half) turned by the row's angle (sign +1), or back (-1).
  auto turn = [=](const Tensor& in, double sign) {
    Tensor out = in.clone();
    dispatch(in.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const T* p = in.data<T>();
      T* o = out.data<T>();
      parallel_loop(n, std::max<std::int64_t>(1, 8192 / std::max<std::int64_t>(w, 1)), [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t r = b; r < e; ++r)
          for (std::int64_t h = 0; h < heads; ++h) {
            const T* x = p + r * w + h * hd;
            T* y = o + r * w + h * hd;
            for (std::int64_t j = 0; j < half; ++j) {
              const T c = static_cast<T>(cs[static_cast<std::size_t>(2 * (r * half + j))]);
              const T s = static_cast<T>(sign * cs[static_cast<std::size_t>(2 * (r * half + j) + 1)]);
              y[j] = x[j] * c - x[j + half] * s;
              y[j + half] = x[j + half] * c + x[j] * s;
            }
          }
      });
    });
    return out;
  };
  return record("rotary", turn(v, 1.0), {rows}, [turn](const Tensor& g) { return Grads{turn(g.contiguous(), -1.0)}; });
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

namespace {

// One row of softmax(causal_mask(x * scale)): query i sees keys first..n-1 (n = i + 1;
// first 0, or i + 1 - window under a sliding window); the rest of the row's T entries are
// zero. `in` may be `out`.
template <class E>
void causal_softmax_row(const E* in, E* out, std::int64_t first, std::int64_t n, std::int64_t T, double scale) {
  for (std::int64_t j = first; j < n; ++j) out[j] = static_cast<E>(in[j] * scale);  // as mul(x, scale)
  E m = *std::max_element(out + first, out + n);
  for (std::int64_t j = first; j < n; ++j) out[j] = exp_of(out[j] - m);
  E sum = 0;
  for (std::int64_t j = first; j < n; ++j) sum += out[j];
  const E inv = E(1) / sum;
  for (std::int64_t j = first; j < n; ++j) out[j] *= inv;
  std::fill(out, out + first, E(0));
  std::fill(out + n, out + T, E(0));
}

// Its backward: softmax's y (g - sum(g y)), then the scale's; the masked keys get zeros.
// `d` may be `g`.
template <class E>
void causal_softmax_row_backward(const E* g, const E* y, E* d, std::int64_t first, std::int64_t n, std::int64_t T,
                                 double scale) {
  E s = 0;
  for (std::int64_t j = first; j < n; ++j) s += g[j] * y[j];
  for (std::int64_t j = first; j < n; ++j) d[j] = static_cast<E>(static_cast<E>(y[j] * (g[j] - s)) * scale);
  std::fill(d, d + first, E(0));
  std::fill(d + n, d + T, E(0));
}

// The first key query r sees: 0, or under a sliding window of `window` keys (0: none) the
// window's first.
std::int64_t first_key(std::int64_t r, std::int64_t window) { return window > 0 ? std::max<std::int64_t>(0, r + 1 - window) : 0; }

}  // namespace

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
    parallel_loop(rows, grain, [&](std::int64_t b, std::int64_t e) {
      // Row r is query r mod T.
      for (std::int64_t r = b; r < e; ++r) causal_softmax_row(px + r * T_, py + r * T_, 0, r % T_ + 1, T_, scale);
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
      parallel_loop(rows, grain, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t r = b; r < e; ++r)
          causal_softmax_row_backward(pg + r * T_, pyv + r * T_, pd + r * T_, 0, r % T_ + 1, T_, scale);
      });
    });
    return Grads{dx};
  });
}

namespace {

// Runs fn(i) for each of `count` heads on the pool, every task with the caller's choice of
// bf16 products (a per-thread setting, as in a batched matmul). Profiled as products (the
// softmax between them is a small part).
template <class Fn>
void for_each_head(std::int64_t count, const Fn& fn) {
  ProfileScope profile(Work::Gemm);
  const bool bf16 = ops::bf16_products();
  parallel_for(count, 1, [&](std::int64_t first, std::int64_t last) {
    const bool own = ops::bf16_products();
    ops::set_bf16_products(bf16);
    for (std::int64_t i = first; i < last; ++i) fn(i);
    ops::set_bf16_products(own);
  });
}

// The causal softmax (under a sliding window of `window` keys, 0: none) of each row of a
// [T, T] block, in place.
void causal_softmax_block(Tensor& s, double scale, std::int64_t window) {
  const std::int64_t T = s.size(0);
  dispatch(s.dtype(), [&](auto zero) {
    using E = decltype(zero);
    E* p = s.data<E>();
    dispatched([&] {
      for (std::int64_t r = 0; r < T; ++r) causal_softmax_row(p + r * T, p + r * T, first_key(r, window), r + 1, T, scale);
    });
  });
}

}  // namespace

Var causal_self_attention(const Var& qkv, std::int64_t heads, std::int64_t kv_heads, std::int64_t window) {
  const Tensor in = qkv.value().contiguous();
  if (kv_heads == 0) kv_heads = heads;
  WEFT_CHECK(in.dim() == 3 && heads >= 1 && kv_heads >= 1 && heads % kv_heads == 0 &&
                 in.size(2) % (heads + 2 * kv_heads) == 0 && window >= 0,
             "causal_self_attention: qkv must be [B, T, (heads + 2 kv_heads) hd] with the heads a multiple of the "
             "key-value heads, got " + shape_to_string(in.shape()));
  const std::int64_t B = in.size(0), T = in.size(1), hd = in.size(2) / (heads + 2 * kv_heads), d = heads * hd;
  const std::int64_t kd = kv_heads * hd, group = heads / kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  // Query head i (sample i / heads, head h = i % heads) and its key-value head h / group:
  // columns of q, k or v (and of the output, laid out as q), read and written in place,
  // without the heads' copies.
  auto head = [=](const Tensor& t, std::int64_t i, std::int64_t part) {
    const std::int64_t h = i % heads, at = part == 0 ? h * hd : d + (part - 1) * kd + h / group * hd;
    return t.select(0, i / heads).slice(1, at, at + hd);
  };
  // Under mixed precision with bf16 instructions the heads' products read bf16 tensors: q, k,
  // v and the attention weights as the SavedTensors keep them, and in backward the incoming
  // gradient and the scores' gradient rounded (as autocast does); without the instructions
  // the products are float32 ones of the rounded operands.
  const bool native = in.dtype() == DType::F32 && ops::bf16_products() && kernels::bf16_native();
  const Tensor x = native ? bf16_operand(qkv).contiguous() : gemm_operand(in);
  const SavedTensor sx = SavedTensor::activation(x);
  Tensor out = Tensor::empty({B, T, d}, in.dtype());
  auto weights = [&](std::int64_t i, Tensor& s) {  // head i's attention weights into s [T, T]
    ops::gemm(false, true, 1.0, head(x, i, 0), head(x, i, 1), 0.0, s);  // q k^T
    causal_softmax_block(s, scale, window);
  };
  auto weighted_values = [&](std::int64_t i, const Tensor& p) {  // head i's output from its weights p
    Tensor o = head(out, i, 0);
    ops::gemm(false, false, 1.0, p, head(x, i, 2), 0.0, o);  // weights v
  };
  Tensor probs = Tensor::empty({B * heads, T, T}, native ? DType::BF16 : in.dtype());
  if (native) {
    // One task per head from scores to output: the float32 weights stay in cache, rounded
    // into the bf16 tensor backward keeps as they are made.
    for_each_head(B * heads, [&](std::int64_t i) {
      Tensor s = Tensor::empty({T, T}, DType::F32);
      weights(i, s);
      Tensor pi = probs.select(0, i);
      pi.copy_(s);
      weighted_values(i, pi);
    });
  } else {
    for_each_head(B * heads, [&](std::int64_t i) {
      Tensor s = probs.select(0, i);
      weights(i, s);
    });
    const Tensor p = gemm_operand(probs);
    for_each_head(B * heads, [&](std::int64_t i) { weighted_values(i, p.select(0, i)); });
  }
  const SavedTensor sp = SavedTensor::activation(probs);
  return record("causal_self_attention", out, {qkv},
                [sx, sp, head, native, B, T, d, kd, heads, kv_heads, group, window, scale](const Tensor& g_in) {
    const Tensor g = native ? g_in.contiguous().to(DType::BF16) : g_in.contiguous();
    const Tensor xv = native ? sx.get_bf16() : sx.get(), pv = native ? sp.get_bf16() : sp.get();
    Tensor dx = Tensor::empty({B, T, d + 2 * kd}, g_in.dtype());
    // One task per key-value head: its query heads in order, each adding to the shared
    // keys' and values' gradients (the first writes them).
    for_each_head(B * kv_heads, [&](std::int64_t j) {
      for (std::int64_t member = 0; member < group; ++member) {
        const std::int64_t i = j / kv_heads * heads + j % kv_heads * group + member;
        const double into = member == 0 ? 0.0 : 1.0;
        const Tensor go = head(g, i, 0), pi = pv.select(0, i);
        Tensor dv = head(dx, i, 2), dq = head(dx, i, 0), dk = head(dx, i, 1);
        Tensor ds = Tensor::empty({T, T}, g_in.dtype());
        ops::gemm(false, true, 1.0, go, head(xv, i, 2), 0.0, ds);  // d weights = g v^T
        ops::gemm(true, false, 1.0, pi, go, into, dv);              // d v += weights^T g
        dispatch(ds.dtype(), [&](auto zero) {
          using E = decltype(zero);
          E* pd = ds.data<E>();
          if (pi.dtype() == DType::BF16) {  // the bf16 weights, widened a row at a time
            std::vector<E> row(static_cast<std::size_t>(T));
            const bf16* py = pi.data<bf16>();
            E* pr = row.data();
            dispatched([&] {
              for (std::int64_t r = 0; r < T; ++r) {
                const std::int64_t first = first_key(r, window);
                for (std::int64_t k = first; k <= r; ++k) pr[k] = widen_as<E>(py[r * T + k]);
                causal_softmax_row_backward(pd + r * T, pr, pd + r * T, first, r + 1, T, scale);
              }
            });
            return;
          }
          const E* py = pi.data<E>();
          dispatched([&] {
            for (std::int64_t r = 0; r < T; ++r)
              causal_softmax_row_backward(pd + r * T, py + r * T, pd + r * T, first_key(r, window), r + 1, T, scale);
          });
        });
        const Tensor dsv = native ? ds.to(DType::BF16) : ds;
        ops::gemm(false, false, 1.0, dsv, head(xv, i, 1), 0.0, dq);  // d q = d scores k
        ops::gemm(true, false, 1.0, dsv, head(xv, i, 0), into, dk);  // d k += d scores^T q
      }
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
