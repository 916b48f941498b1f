// Seed 001's worked example, with weft's library: a 2-2-1 ReLU network, one forward pass,
// the squared-error loss, backpropagation and one SGD step with learning rate 0.01.
//
//   build/examples/seed001_backprop
#include <cstdio>

#include "weft/autograd/functions.h"
#include "weft/nn/linear.h"
#include "weft/optim/sgd.h"

using namespace weft;

int main() {
  Rng rng(0);
  Linear hidden(2, 2, rng, true, Init::kKaimingNormal, DType::F64);
  Linear output(2, 1, rng, true, Init::kKaimingNormal, DType::F64);
  hidden.weight().mutable_value().copy_(Tensor::from_vector(std::vector<double>{0.5, 0.5, 1.0, 1.0}, {2, 2}));
  hidden.bias().mutable_value().copy_(Tensor::from_vector(std::vector<double>{0.0, 0.5}, {2}));
  output.weight().mutable_value().copy_(Tensor::from_vector(std::vector<double>{1.0, 1.0}, {1, 2}));
  output.bias().mutable_value().copy_(Tensor::from_vector(std::vector<double>{0.5}, {1}));

  Var x(Tensor::from_vector(std::vector<double>{1.0, 0.0}, {1, 2}));
  Var target(Tensor::from_vector(std::vector<double>{2.0}, {1, 1}));
  auto params = hidden.named_parameters();
  for (auto& p : output.named_parameters()) params.emplace_back("out." + p.first, p.second);
  SGD sgd(params, 0.01);

  for (int step = 0; step < 2; ++step) {
    Var h = relu(hidden(x));
    Var o = relu(output(h));
    Var loss = mse_loss(o, target);  // (O5 - Ye)^2
    std::printf("pass %d: H3 = %.4f  H4 = %.4f  O5 = %.4f  loss = %.6f\n", step + 1, h.value().at({0, 0}),
                h.value().at({0, 1}), o.value().at({0, 0}), loss.item());
    if (step == 1) break;
    sgd.zero_grad();
    loss.backward();
    std::printf("dL/dW53 = %.4f  dL/dW54 = %.4f  dL/db5 = %.4f\n", output.weight().grad().at({0, 0}),
                output.weight().grad().at({0, 1}), output.bias().grad().at({0}));
    sgd.step();
    std::printf("after one SGD step: W53 = %.4f  W54 = %.4f  W31 = %.4f  b3 = %.4f\n",
                output.weight().value().at({0, 0}), output.weight().value().at({0, 1}),
                hidden.weight().value().at({0, 0}), hidden.bias().value().at({0}));
  }
  return 0;
}
