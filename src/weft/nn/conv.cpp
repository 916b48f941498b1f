#include "weft/nn/conv.h"

#include "weft/autograd/functions.h"

namespace weft {

Conv2d::Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel, Rng& rng,
               std::int64_t stride, std::int64_t padding, bool bias, Init init, DType dtype)
    : in_(in_channels), out_(out_channels), kernel_(kernel), stride_(stride), padding_(padding) {
  WEFT_CHECK(kernel >= 1 && stride >= 1 && padding >= 0, "Conv2d: bad kernel, stride or padding");
  Tensor w = Tensor::empty({out_channels, in_channels, kernel, kernel}, dtype);
  init_(w, init, rng);
  weight_ = register_parameter("weight", w);
  if (bias) bias_ = register_parameter("bias", Tensor::zeros({out_channels}, dtype));
}

Var Conv2d::forward(const Var& x) {
  WEFT_CHECK(x.dim() == 4 && x.size(1) == in_, describe() + ": input shape " + shape_to_string(x.shape()));
  return conv2d(x, weight_, bias_, stride_, padding_);
}

std::string Conv2d::describe() const {
  return "Conv2d(" + std::to_string(in_) + " -> " + std::to_string(out_) + ", " + std::to_string(kernel_) +
         "x" + std::to_string(kernel_) + ", stride " + std::to_string(stride_) + ", padding " +
         std::to_string(padding_) + ")";
}

MaxPool2d::MaxPool2d(std::int64_t kernel, std::int64_t stride)
    : kernel_(kernel), stride_(stride == 0 ? kernel : stride) {}

Var MaxPool2d::forward(const Var& x) { return max_pool2d(x, kernel_, stride_); }
Var MaxPool2d::forward_relu(const Var& x) { return relu_max_pool2d(x, kernel_, stride_); }

std::string MaxPool2d::describe() const {
  return "MaxPool2d(" + std::to_string(kernel_) + ", stride " + std::to_string(stride_) + ")";
}

Var Flatten::forward(const Var& x) { return flatten(x, 1); }

}  // namespace weft
