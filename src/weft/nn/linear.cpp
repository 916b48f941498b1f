#include "weft/nn/linear.h"

#include "weft/autograd/functions.h"

namespace weft {

Linear::Linear(std::int64_t in_features, std::int64_t out_features, Rng& rng, bool bias, Init init,
               DType dtype)
    : in_(in_features), out_(out_features) {
  Tensor w = Tensor::empty({out_features, in_features}, dtype);
  init_(w, init, rng);
  weight_ = register_parameter("weight", w);
  if (bias) bias_ = register_parameter("bias", Tensor::zeros({out_features}, dtype));
}

Var Linear::forward(const Var& x) {
  WEFT_CHECK(x.dim() == 2 && x.size(1) == in_, describe() + ": input shape " + shape_to_string(x.shape()));
  return linear(x, weight_, bias_);
}

Var Linear::forward_relu(const Var& x) {
  WEFT_CHECK(x.dim() == 2 && x.size(1) == in_, describe() + ": input shape " + shape_to_string(x.shape()));
  return linear_relu(x, weight_, bias_);
}

std::string Linear::describe() const {
  return "Linear(" + std::to_string(in_) + " -> " + std::to_string(out_) + (bias_.defined() ? "" : ", no bias") + ")";
}

}  // namespace weft
