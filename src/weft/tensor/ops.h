// Element-wise operations with broadcasting, reductions and softmax on tensors.
// Pure tensor math, no autograd: the autograd layer builds on these kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "weft/tensor/tensor.h"

namespace weft::ops {

void copy_into(Tensor& dst, const Tensor& src);  // src broadcasts to dst's shape
void fill(Tensor& t, double value);
// The f32 tensor with each value rounded to the nearest bfloat16 (ties to even): what a
// bf16 matrix unit reads.
Tensor round_bf16(const Tensor& a);

// Element-wise, NumPy broadcasting; both operands must have the same dtype.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);

Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor square(const Tensor& a);
Tensor relu(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor relu_backward(const Tensor& grad, const Tensor& input);  // grad * (input > 0)
Tensor sigmoid_backward(const Tensor& grad, const Tensor& out);  // grad * out * (1 - out)
Tensor tanh_backward(const Tensor& grad, const Tensor& out);     // grad * (1 - out^2)

// In place: a += alpha * b (b broadcasts to a), a *= s.
void add_(Tensor& a, const Tensor& b, double alpha = 1.0);
void mul_(Tensor& a, double s);
void relu_(Tensor& a);  // relu(a) in place, the same values as relu(a)

// Reductions. Sums accumulate in the tensor's dtype, in a fixed order.
Tensor sum(const Tensor& a);  // all elements, a 0-d tensor
Tensor sum(const Tensor& a, const std::vector<std::int64_t>& dims, bool keepdim);
Tensor mean(const Tensor& a);
Tensor mean(const Tensor& a, const std::vector<std::int64_t>& dims, bool keepdim);
// Sums `a` down to `shape`, the shape it was broadcast from (gradient of broadcasting).
Tensor sum_to_shape(const Tensor& a, const Shape& shape);
// Index of the maximum of each row of a 2-D tensor (first one on ties).
std::vector<std::int64_t> argmax_rows(const Tensor& a);

// Along the last dimension, numerically stable (max subtracted).
Tensor softmax(const Tensor& a);
Tensor log_softmax(const Tensor& a);

// The sum of the squared elements, accumulated in double in a fixed order (a squared L2
// norm: tensor/fixed_sum.h).
double sum_of_squares(const Tensor& a);

// Comparisons for tests and checks.
double max_abs_diff(const Tensor& a, const Tensor& b);
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
bool equal(const Tensor& a, const Tensor& b);  // same shape and bitwise-equal values

}  // namespace weft::ops
