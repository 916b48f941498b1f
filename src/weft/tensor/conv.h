// 2-D convolution (cross-correlation, as deep-learning frameworks define it) and 2-D max
// pooling, NCHW layout. A float32 convolution runs on oneDNN's direct kernels in slices of
// the batch (conv_batch_slices: fixed by the shape, one single-threaded call each on the
// pool, the weights' gradient summed over slices in order), or through im2col + one GEMM
// over the whole batch, as the kernel table chooses (kernel_table.h); float64 always
// through im2col. Under bf16 products (linalg.h) oneDNN's convolutions read bf16 operands.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "weft/tensor/tensor.h"

namespace weft::ops {

// Output size of a convolution or pooling window: floor((in + 2*pad - kernel) / stride) + 1.
std::int64_t conv_output_size(std::int64_t in, std::int64_t kernel, std::int64_t stride,
                              std::int64_t pad);

// x [N, C, H, W] -> columns [C*KH*KW, N*OH*OW]; zero where the window covers padding.
Tensor im2col(const Tensor& x, std::int64_t kh, std::int64_t kw, std::int64_t stride, std::int64_t pad);
// The adjoint of im2col: sums columns back into an image of shape x_shape.
Tensor col2im(const Tensor& col, const Shape& x_shape, std::int64_t kh, std::int64_t kw,
              std::int64_t stride, std::int64_t pad);

// How a batch of n samples is sliced for oneDNN: `count` slices of `size` samples (the last
// may be smaller); at least 8 samples a slice, at most 8 slices.
struct BatchSlices {
  std::int64_t size, count;
};
BatchSlices conv_batch_slices(std::int64_t n);

struct Conv2dForward {
  Tensor out;    // [N, Cout, OH, OW]
  Tensor saved;  // kept for the backward pass: the im2col matrix, or the input itself
  bool saved_is_col = true;
};
// x [N, Cin, H, W], w [Cout, Cin, KH, KW], bias [Cout] or undefined.
Conv2dForward conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, std::int64_t stride,
                     std::int64_t pad);

struct Conv2dGrads {
  Tensor dx, dw, db;  // dx and db undefined when not requested
};
// `saved` and `saved_is_col` as the forward pass returned them.
Conv2dGrads conv2d_backward(const Tensor& grad_out, const Shape& x_shape, const Tensor& w,
                            const Tensor& saved, bool saved_is_col, std::int64_t stride, std::int64_t pad,
                            bool need_dx, bool need_db);

struct MaxPool2dForward {
  Tensor out;                                    // [N, C, OH, OW]
  std::shared_ptr<std::vector<std::int32_t>> argmax;  // per output: index within its input plane
};
// With relu, the pooling of relu(x) in one pass (max commutes with ReLU): an output at or
// below zero is 0 and its argmax -1 (no gradient), as ReLU's backward would give. Without
// `indices` (no backward to come: evaluation), argmax is left null and not allocated.
MaxPool2dForward max_pool2d(const Tensor& x, std::int64_t kernel, std::int64_t stride, bool relu = false,
                            bool indices = true);
// An argmax of -1 passes no gradient.
Tensor max_pool2d_backward(const Tensor& grad_out, const std::vector<std::int32_t>& argmax,
                           const Shape& x_shape);

}  // namespace weft::ops
