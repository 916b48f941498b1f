#include "weft/tensor/conv.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "weft/tensor/kernel_table.h"
#include "weft/tensor/linalg.h"
#include "weft/tensor/onednn.h"
#include "weft/tensor/ops.h"
#include "weft/tensor/profile.h"
#include "weft/tensor/thread_pool.h"

namespace weft::ops {

std::int64_t conv_output_size(std::int64_t in, std::int64_t kernel, std::int64_t stride,
                              std::int64_t pad) {
  WEFT_CHECK(stride >= 1 && kernel >= 1 && pad >= 0, "convolution: bad kernel, stride or padding");
  std::int64_t span = in + 2 * pad - kernel;
  WEFT_CHECK(span >= 0, "convolution: kernel " + std::to_string(kernel) + " larger than padded input " +
                            std::to_string(in + 2 * pad));
  return span / stride + 1;
}

Tensor im2col(const Tensor& x_in, std::int64_t kh, std::int64_t kw, std::int64_t stride, std::int64_t pad) {
  WEFT_CHECK(x_in.dim() == 4, "im2col: input must be [N, C, H, W]");
  Tensor x = x_in.contiguous();
  const std::int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const std::int64_t OH = conv_output_size(H, kh, stride, pad), OW = conv_output_size(W, kw, stride, pad);
  const std::int64_t P = OH * OW;
  Tensor col = Tensor::empty({C * kh * kw, N * P}, x.dtype());
  dispatch(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data<T>();
    T* pc = col.data<T>();
    // One task per (row of col, sample): row r = (c, i, j).
    parallel_loop(C * kh * kw * N, 16, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t task = b; task < e; ++task) {
        std::int64_t r = task / N, n = task % N;
        std::int64_t c = r / (kh * kw), i = (r / kw) % kh, j = r % kw;
        const T* plane = px + (n * C + c) * H * W;
        T* dst = pc + r * N * P + n * P;
        for (std::int64_t oh = 0; oh < OH; ++oh) {
          std::int64_t ih = oh * stride - pad + i;
          T* d = dst + oh * OW;
          if (ih < 0 || ih >= H) {
            std::memset(d, 0, sizeof(T) * OW);
            continue;
          }
          const T* src = plane + ih * W;
          if (stride == 1) {
            // iw = ow - pad + j; valid ow in [lo, hi)
            std::int64_t lo = std::max<std::int64_t>(0, pad - j);
            std::int64_t hi = std::min<std::int64_t>(OW, W + pad - j);
            for (std::int64_t ow = 0; ow < lo; ++ow) d[ow] = 0;
            if (hi > lo) std::memcpy(d + lo, src + lo - pad + j, sizeof(T) * (hi - lo));
            for (std::int64_t ow = std::max(hi, lo); ow < OW; ++ow) d[ow] = 0;
          } else {
            for (std::int64_t ow = 0; ow < OW; ++ow) {
              std::int64_t iw = ow * stride - pad + j;
              d[ow] = (iw >= 0 && iw < W) ? src[iw] : T(0);
            }
          }
        }
      }
    });
  });
  return col;
}

namespace {
// Sums the columns pc ([C·kh·kw, n·P], sample s at column s·P) into the zeroed images px
// ([n, C, H, W]): one task per input plane, its contributions summed in a fixed order.
template <typename T>
void col2im_into(const T* pc, T* px, std::int64_t n, std::int64_t C, std::int64_t H, std::int64_t W, std::int64_t kh,
                 std::int64_t kw, std::int64_t stride, std::int64_t pad) {
  const std::int64_t OH = conv_output_size(H, kh, stride, pad), OW = conv_output_size(W, kw, stride, pad);
  const std::int64_t P = OH * OW, ld = n * P;
  if (stride == 1 && OH == H && OW == W) {
    // A "same" convolution: row (c, i, j) of a sample's columns is its plane shifted by
    // (i - pad, j - pad), so it adds in one contiguous run over the rows that stay inside;
    // mask[j] zeroes the columns that would wrap around a side. Same sums in the same order
    // as the general loop below (a masked term adds an exact zero), but vectorized.
    std::vector<T> mask(static_cast<std::size_t>(kw * P));
    for (std::int64_t j = 0; j < kw; ++j)
      for (std::int64_t q = 0; q < P; ++q) {
        const std::int64_t iw = q % OW - pad + j;
        mask[static_cast<std::size_t>(j * P + q)] = iw >= 0 && iw < W ? T(1) : T(0);
      }
    parallel_loop(n * C, 4, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t task = b; task < e; ++task) {
        const std::int64_t s = task / C, c = task % C;
        T* plane = px + (s * C + c) * P;
        for (std::int64_t i = 0; i < kh; ++i) {
          const std::int64_t oh0 = std::max<std::int64_t>(0, pad - i), oh1 = std::min<std::int64_t>(OH, H + pad - i);
          for (std::int64_t j = 0; j < kw; ++j) {
            const T* src = pc + ((c * kh + i) * kw + j) * ld + s * P;
            const T* m = mask.data() + j * P;
            const std::int64_t shift = (i - pad) * W + (j - pad);  // plane index = q + shift
            // The first and last terms may fall just outside the plane; they are masked.
            const std::int64_t lo = std::max(oh0 * OW, -shift), hi = std::min(oh1 * OW, P - shift);
            for (std::int64_t q = lo; q < hi; ++q) plane[q + shift] += src[q] * m[q];
          }
        }
      }
    });
    return;
  }
  parallel_loop(n * C, 4, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t task = b; task < e; ++task) {
      const std::int64_t s = task / C, c = task % C;
      T* plane = px + (s * C + c) * H * W;
      for (std::int64_t i = 0; i < kh; ++i) {
        for (std::int64_t j = 0; j < kw; ++j) {
          const T* srow = pc + ((c * kh + i) * kw + j) * ld + s * P;
          for (std::int64_t oh = 0; oh < OH; ++oh) {
            const std::int64_t ih = oh * stride - pad + i;
            if (ih < 0 || ih >= H) continue;
            T* drow = plane + ih * W;
            const T* src = srow + oh * OW;
            if (stride == 1) {
              // iw = ow - pad + j: one contiguous run of valid columns.
              const std::int64_t lo = std::max<std::int64_t>(0, pad - j);
              const std::int64_t hi = std::min<std::int64_t>(OW, W + pad - j);
              T* d = drow - pad + j;
              for (std::int64_t ow = lo; ow < hi; ++ow) d[ow] += src[ow];
            } else {
              for (std::int64_t ow = 0; ow < OW; ++ow) {
                const std::int64_t iw = ow * stride - pad + j;
                if (iw >= 0 && iw < W) drow[iw] += src[ow];
              }
            }
          }
        }
      }
    }
  });
}
}  // namespace

Tensor col2im(const Tensor& col_in, const Shape& x_shape, std::int64_t kh, std::int64_t kw,
              std::int64_t stride, std::int64_t pad) {
  Tensor col = col_in.contiguous();
  const std::int64_t N = x_shape[0], C = x_shape[1], H = x_shape[2], W = x_shape[3];
  const std::int64_t P = conv_output_size(H, kh, stride, pad) * conv_output_size(W, kw, stride, pad);
  WEFT_CHECK(col.size(0) == C * kh * kw && col.size(1) == N * P, "col2im: column shape");
  Tensor x = Tensor::zeros(x_shape, col.dtype());
  dispatch(col.dtype(), [&](auto zero) {
    using T = decltype(zero);
    col2im_into(col.data<T>(), x.data<T>(), N, C, H, W, kh, kw, stride, pad);
  });
  return x;
}

BatchSlices conv_batch_slices(std::int64_t n) {
  constexpr std::int64_t kMinSize = 8, kMaxCount = 8;
  const std::int64_t size = std::max(kMinSize, (n + kMaxCount - 1) / kMaxCount);
  return {size, std::max<std::int64_t>(1, (n + size - 1) / size)};
}

namespace {

onednn::ConvShape dnnl_shape(const Shape& x, const Shape& w, std::int64_t n, std::int64_t stride, std::int64_t pad,
                             bool bf16) {
  return {n,      x[1], x[2], x[3], w[0], w[2], w[3], stride, pad, conv_output_size(x[2], w[2], stride, pad),
          conv_output_size(x[3], w[3], stride, pad), bf16};
}

// Whether this thread's convolution of these shapes runs on bf16 instructions: as its
// product [Cout, C·KH·KW] x [C·KH·KW, N·OH·OW] would (read on the calling thread: the
// flag is the caller's).
bool bf16_convolution(const Shape& x, const Shape& w, std::int64_t stride, std::int64_t pad) {
  const std::int64_t oh = conv_output_size(x[2], w[2], stride, pad), ow = conv_output_size(x[3], w[3], stride, pad);
  return bf16_instructions_for(w[0], x[0] * oh * ow, x[1] * w[2] * w[3]);
}

// fn(first sample, samples, slice index) for each slice of the batch, on the pool.
template <class Fn>
void for_each_slice(std::int64_t n, Fn fn) {
  const BatchSlices slices = conv_batch_slices(n);
  parallel_for(slices.count, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const std::int64_t first = i * slices.size;
      fn(first, std::min(slices.size, n - first), i);
    }
  });
}

Conv2dForward conv2d_onednn(const Tensor& x_in, const Tensor& w_in, const Tensor& bias, std::int64_t stride,
                            std::int64_t pad) {
  Tensor x = x_in.contiguous(), w = w_in.contiguous();
  Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  const std::int64_t N = x.size(0), Cout = w.size(0);
  const std::int64_t OH = conv_output_size(x.size(2), w.size(2), stride, pad);
  const std::int64_t OW = conv_output_size(x.size(3), w.size(3), stride, pad);
  Conv2dForward f;
  f.out = Tensor::empty({N, Cout, OH, OW}, DType::F32);
  const std::int64_t in_sample = x.numel() / std::max<std::int64_t>(N, 1), out_sample = Cout * OH * OW;
  const bool bf16 = bf16_convolution(x.shape(), w.shape(), stride, pad);
  for_each_slice(N, [&](std::int64_t first, std::int64_t count, std::int64_t) {
    onednn::conv_forward(dnnl_shape(x.shape(), w.shape(), count, stride, pad, bf16), x.data<float>() + first * in_sample,
                         w.data<float>(), b.defined() ? b.data<float>() : nullptr,
                         f.out.data<float>() + first * out_sample);
  });
  f.saved = x;
  f.saved_is_col = false;
  return f;
}

}  // namespace

Conv2dForward conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, std::int64_t stride,
                     std::int64_t pad) {
  ProfileScope profile(Work::Conv);
  WEFT_CHECK(x.dim() == 4 && w.dim() == 4, "conv2d: input " + shape_to_string(x.shape()) + " and weight " +
                                               shape_to_string(w.shape()) + " must be 4-D");
  WEFT_CHECK(x.size(1) == w.size(1), "conv2d: input has " + std::to_string(x.size(1)) +
                                         " channels, weight expects " + std::to_string(w.size(1)));
  const std::int64_t N = x.size(0), Cout = w.size(0), KH = w.size(2), KW = w.size(3);
  const std::int64_t OH = conv_output_size(x.size(2), KH, stride, pad);
  const std::int64_t OW = conv_output_size(x.size(3), KW, stride, pad);
  if (x.dtype() == DType::F32 && N > 0 && kernels::conv_forward() == kernels::Conv::OneDnn)
    return conv2d_onednn(x, w, bias, stride, pad);
  const std::int64_t P = OH * OW;
  Conv2dForward f;
  f.saved = im2col(x, KH, KW, stride, pad);
  Tensor wm = w.contiguous().view({Cout, -1});
  Tensor tmp = Tensor::empty({Cout, N * P}, x.dtype());
  gemm(false, false, 1.0, wm, f.saved, 0.0, tmp);
  // [Cout, N*P] -> [N, Cout, P] plus bias.
  f.out = Tensor::empty({N, Cout, OH, OW}, x.dtype());
  dispatch(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* pt = tmp.data<T>();
    T* po = f.out.data<T>();
    const T* pb = bias.defined() ? bias.contiguous().data<T>() : nullptr;
    parallel_loop(N * Cout, 8, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t task = b; task < e; ++task) {
        std::int64_t n = task / Cout, co = task % Cout;
        const T* s = pt + co * N * P + n * P;
        T* d = po + task * P;
        T bv = pb ? pb[co] : T(0);
        for (std::int64_t p = 0; p < P; ++p) d[p] = s[p] + bv;
      }
    });
  });
  return f;
}

namespace {

// grad_out [N, Cout, P] as the matrix [Cout, N*P], and the bias gradient when asked.
Tensor grad_matrix(const Tensor& grad_out, bool need_db, Tensor& db) {
  const std::int64_t N = grad_out.size(0), Cout = grad_out.size(1);
  const std::int64_t P = grad_out.size(2) * grad_out.size(3);
  Tensor g = Tensor::empty({Cout, N * P}, grad_out.dtype());
  if (need_db) db = Tensor::empty({Cout}, grad_out.dtype());
  dispatch(grad_out.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* pg = grad_out.data<T>();
    T* pt = g.data<T>();
    parallel_loop(Cout, 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t co = b; co < e; ++co) {
        // The bias gradient in 16 interleaved partial sums (one running sum would be a chain
        // of dependent additions), added up at the end: a fixed order, so deterministic.
        constexpr std::int64_t kLanes = 16;
        T lanes[kLanes] = {};
        for (std::int64_t n = 0; n < N; ++n) {
          const T* s = pg + (n * Cout + co) * P;
          T* d = pt + co * N * P + n * P;
          std::memcpy(d, s, sizeof(T) * P);
          if (!need_db) continue;
          std::int64_t p = 0;
          for (; p + kLanes <= P; p += kLanes)
            for (std::int64_t l = 0; l < kLanes; ++l) lanes[l] += s[p + l];
          for (; p < P; ++p) lanes[p % kLanes] += s[p];
        }
        if (need_db) {
          T acc = 0;
          for (T v : lanes) acc += v;
          db.data<T>()[co] = acc;
        }
      }
    });
  });
  return g;
}

// The input's gradient as col2im(w^T g), g from grad_matrix.
Tensor input_grad_im2col(const Tensor& g, const Tensor& w, const Shape& x_shape, std::int64_t stride,
                         std::int64_t pad) {
  Tensor wm = w.contiguous().view({w.size(0), -1});
  Tensor dcol = Tensor::empty({wm.size(1), g.size(1)}, g.dtype());
  gemm(true, false, 1.0, wm, g, 0.0, dcol);
  return col2im(dcol, x_shape, w.size(2), w.size(3), stride, pad);
}

Conv2dGrads conv2d_backward_onednn(const Tensor& grad_out, const Tensor& x, const Tensor& w_in, std::int64_t stride,
                                   std::int64_t pad, bool need_dx, bool need_db) {
  Tensor w = w_in.contiguous();
  const std::int64_t N = x.size(0), Cout = w.size(0), wsize = w.numel();
  const std::int64_t in_sample = x.numel() / std::max<std::int64_t>(N, 1);
  const std::int64_t out_sample = grad_out.numel() / std::max<std::int64_t>(N, 1);
  const BatchSlices slices = conv_batch_slices(N);
  // Each slice's weight (and bias) gradient, then their sum in slice order.
  std::vector<float> dw_parts(static_cast<std::size_t>(slices.count * wsize));
  std::vector<float> db_parts(static_cast<std::size_t>(slices.count * Cout));
  const bool dx_here = need_dx && kernels::conv_backward_data(x.size(1)) == kernels::Conv::OneDnn;
  Conv2dGrads r;
  if (dx_here) r.dx = Tensor::empty(x.shape(), DType::F32);
  const bool bf16 = bf16_convolution(x.shape(), w.shape(), stride, pad);
  for_each_slice(N, [&](std::int64_t first, std::int64_t count, std::int64_t slice) {
    const onednn::ConvShape shape = dnnl_shape(x.shape(), w.shape(), count, stride, pad, bf16);
    const float* dy = grad_out.data<float>() + first * out_sample;
    onednn::conv_backward(shape, x.data<float>() + first * in_sample, dy, w.data<float>(),
                          dx_here ? r.dx.data<float>() + first * in_sample : nullptr, dw_parts.data() + slice * wsize,
                          db_parts.data() + slice * Cout);
  });
  auto sum_parts = [&](const std::vector<float>& parts, std::int64_t size, const Shape& shape) {
    Tensor out = Tensor::empty(shape, DType::F32);
    float* po = out.data<float>();
    parallel_loop(size, 4096, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        float acc = parts[static_cast<std::size_t>(i)];
        for (std::int64_t sl = 1; sl < slices.count; ++sl) acc += parts[static_cast<std::size_t>(sl * size + i)];
        po[i] = acc;
      }
    });
    return out;
  };
  r.dw = sum_parts(dw_parts, wsize, w.shape());
  if (need_db) r.db = sum_parts(db_parts, Cout, {Cout});
  if (need_dx && !dx_here) {
    Tensor unused;
    r.dx = input_grad_im2col(grad_matrix(grad_out, false, unused), w, x.shape(), stride, pad);
  }
  return r;
}

}  // namespace

Conv2dGrads conv2d_backward(const Tensor& grad_out_in, const Shape& x_shape, const Tensor& w,
                            const Tensor& saved, bool saved_is_col, std::int64_t stride, std::int64_t pad,
                            bool need_dx, bool need_db) {
  ProfileScope profile(Work::Conv);
  Tensor grad_out = grad_out_in.contiguous();
  if (!saved_is_col) return conv2d_backward_onednn(grad_out, saved, w, stride, pad, need_dx, need_db);
  Conv2dGrads r;
  Tensor g = grad_matrix(grad_out, need_db, r.db);
  Tensor dwm = Tensor::empty({grad_out.size(1), saved.size(0)}, grad_out.dtype());
  gemm(false, true, 1.0, g, saved, 0.0, dwm);
  r.dw = dwm.view(w.shape());
  if (need_dx) r.dx = input_grad_im2col(g, w, x_shape, stride, pad);
  return r;
}

namespace {
// ReLU of a pooled plane: outputs not above zero become 0 and pass no gradient.
template <typename T>
void relu_plane(T* out, std::int32_t* argmax, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (!(out[i] > T(0))) {
      out[i] = T(0);
      argmax[i] = -1;
    }
  }
}
}  // namespace

MaxPool2dForward max_pool2d(const Tensor& x_in, std::int64_t kernel, std::int64_t stride, bool relu, bool indices) {
  ProfileScope profile(Work::Conv);
  WEFT_CHECK(x_in.dim() == 4, "max_pool2d: input must be [N, C, H, W]");
  Tensor x = x_in.contiguous();
  const std::int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const std::int64_t OH = conv_output_size(H, kernel, stride, 0), OW = conv_output_size(W, kernel, stride, 0);
  MaxPool2dForward f;
  f.out = Tensor::empty({N, C, OH, OW}, x.dtype());
  if (indices) f.argmax = std::make_shared<std::vector<std::int32_t>>(static_cast<size_t>(N * C * OH * OW));
  dispatch(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data<T>();
    T* po = f.out.data<T>();
    std::int32_t* pa = indices ? f.argmax->data() : nullptr;
    parallel_loop(N * C, 16, [&](std::int64_t b, std::int64_t e) {
      std::vector<std::int32_t> scratch(pa ? 0 : static_cast<std::size_t>(OH * OW));  // (the indices unkept)
      for (std::int64_t plane = b; plane < e; ++plane) {
        const T* src = px + plane * H * W;
        T* dst = po + plane * OH * OW;
        std::int32_t* idx = pa ? pa + plane * OH * OW : scratch.data();
        if (kernel == 2 && stride == 2) {  // the common case, unrolled; same order and ties
          for (std::int64_t oh = 0; oh < OH; ++oh) {
            for (std::int64_t ow = 0; ow < OW; ++ow) {
              const std::int64_t at[4] = {2 * oh * W + 2 * ow, 2 * oh * W + 2 * ow + 1, (2 * oh + 1) * W + 2 * ow,
                                          (2 * oh + 1) * W + 2 * ow + 1};
              T best = -std::numeric_limits<T>::infinity();
              std::int64_t best_i = at[0];
              for (std::int64_t k : at) {
                if (src[k] > best) {
                  best = src[k];
                  best_i = k;
                }
              }
              dst[oh * OW + ow] = best;
              idx[oh * OW + ow] = static_cast<std::int32_t>(best_i);
            }
          }
          if (relu) relu_plane(dst, idx, OH * OW);
          continue;
        }
        for (std::int64_t oh = 0; oh < OH; ++oh) {
          for (std::int64_t ow = 0; ow < OW; ++ow) {
            T best = -std::numeric_limits<T>::infinity();
            std::int64_t best_i = (oh * stride) * W + ow * stride;
            for (std::int64_t i = 0; i < kernel; ++i) {
              for (std::int64_t j = 0; j < kernel; ++j) {
                std::int64_t at = (oh * stride + i) * W + ow * stride + j;
                if (src[at] > best) {
                  best = src[at];
                  best_i = at;
                }
              }
            }
            dst[oh * OW + ow] = best;
            idx[oh * OW + ow] = static_cast<std::int32_t>(best_i);
          }
        }
        if (relu) relu_plane(dst, idx, OH * OW);
      }
    });
  });
  return f;
}

Tensor max_pool2d_backward(const Tensor& grad_out_in, const std::vector<std::int32_t>& argmax,
                           const Shape& x_shape) {
  ProfileScope profile(Work::Conv);
  Tensor grad_out = grad_out_in.contiguous();
  Tensor dx = Tensor::zeros(x_shape, grad_out.dtype());
  const std::int64_t planes = x_shape[0] * x_shape[1];
  const std::int64_t in_plane = x_shape[2] * x_shape[3];
  const std::int64_t out_plane = grad_out.size(2) * grad_out.size(3);
  dispatch(grad_out.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* pg = grad_out.data<T>();
    T* pd = dx.data<T>();
    parallel_loop(planes, 16, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t plane = b; plane < e; ++plane) {
        for (std::int64_t o = 0; o < out_plane; ++o) {
          const std::int32_t at = argmax[plane * out_plane + o];
          if (at >= 0) pd[plane * in_plane + at] += pg[plane * out_plane + o];
        }
      }
    });
  });
  return dx;
}

}  // namespace weft::ops
