// Differentiable operations on Vars. Each records its backward function; every one of
// them is verified against finite differences in double precision (tests/autograd).
#pragma once

#include <cstdint>
#include <vector>

#include "weft/autograd/variable.h"
#include "weft/tensor/rng.h"

namespace weft {

// Element-wise with broadcasting.
Var add(const Var& a, const Var& b);
Var sub(const Var& a, const Var& b);
Var mul(const Var& a, const Var& b);
Var div(const Var& a, const Var& b);
Var add(const Var& a, double s);
Var mul(const Var& a, double s);
Var neg(const Var& a);
Var exp(const Var& a);
Var log(const Var& a);
Var relu(const Var& a);
Var sigmoid(const Var& a);
Var tanh(const Var& a);
inline Var operator+(const Var& a, const Var& b) { return add(a, b); }
inline Var operator-(const Var& a, const Var& b) { return sub(a, b); }
inline Var operator*(const Var& a, const Var& b) { return mul(a, b); }
inline Var operator/(const Var& a, const Var& b) { return div(a, b); }

// Linear algebra.
Var matmul(const Var& a, const Var& b);                    // 2-D, or batched 3-D
Var linear(const Var& x, const Var& w, const Var& bias);   // x w^T + bias; bias may be undefined
// relu(linear(x, w, bias)) as one operation: the ReLU in place on the product's output,
// which backward keeps (once, for its sign and as the next product's operand) instead of
// the pre-activation as well: the same values and gradients, bit for bit.
Var linear_relu(const Var& x, const Var& w, const Var& bias);

// Reductions and shapes.
Var sum(const Var& a);
Var sum(const Var& a, const std::vector<std::int64_t>& dims, bool keepdim);
Var mean(const Var& a);
Var reshape(const Var& a, const Shape& shape);
Var flatten(const Var& a, std::int64_t start_dim = 1);
Var transpose(const Var& a, std::int64_t d0, std::int64_t d1);

// Along the last dimension.
Var softmax(const Var& a);
Var log_softmax(const Var& a);

// Losses (mean over the batch).
// Cross-entropy of logits [N, C] against class indices, fused with log-softmax.
Var cross_entropy(const Var& logits, const std::vector<std::int32_t>& targets);
Var mse_loss(const Var& pred, const Var& target);       // mean((pred - target)^2)
Var half_mse_loss(const Var& pred, const Var& target);  // mean((pred - target)^2) / 2

// Convolutional layers (NCHW).
Var conv2d(const Var& x, const Var& w, const Var& bias, std::int64_t stride, std::int64_t padding);
Var max_pool2d(const Var& x, std::int64_t kernel, std::int64_t stride);
// max_pool2d(relu(x)) in one pass, the same values and gradients (ops::max_pool2d's relu).
Var relu_max_pool2d(const Var& x, std::int64_t kernel, std::int64_t stride);
// Inverted dropout: zeroes each element with probability p and scales the rest by 1/(1-p),
// one pass forward and one backward; the mask kept for backward is a byte per element.
Var dropout(const Var& x, double p, Rng& rng);

}  // namespace weft
