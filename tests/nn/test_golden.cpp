// Golden values from the seeds (../shared/notes): never their errata.
#include <gtest/gtest.h>

#include <cmath>

#include "weft/autograd/functions.h"
#include "weft/nn/activation.h"
#include "weft/nn/linear.h"
#include "weft/nn/models.h"
#include "weft/tensor/ops.h"

using namespace weft;

namespace {
void set(Var& v, std::vector<double> values) {
  v.mutable_value().copy_(Tensor::from_vector(values, v.shape()));
}
}  // namespace

// Seed 001: the 2-2-1 ReLU network, one SGD step with learning rate 0.01.
TEST(Golden, Seed001TwoTwoOneNetwork) {
  Rng rng(0);
  Linear hidden(2, 2, rng, true, Init::kKaimingNormal, DType::F64);
  Linear output(2, 1, rng, true, Init::kKaimingNormal, DType::F64);
  set(hidden.weight(), {0.5, 0.5, 1.0, 1.0});  // W31 W32 / W41 W42
  set(hidden.bias(), {0.0, 0.5});              // b3 = 0, b4 = 0.5 (the calculations' values)
  set(output.weight(), {1.0, 1.0});            // W53 W54
  set(output.bias(), {0.5});                   // b5
  Var x(Tensor::from_vector(std::vector<double>{1.0, 0.0}, {1, 2}));
  Var target(Tensor::from_vector(std::vector<double>{2.0}, {1, 1}));

  auto forward = [&] {
    Var h = relu(hidden(x));
    return std::make_pair(h, relu(output(h)));
  };
  auto [h, o] = forward();
  EXPECT_DOUBLE_EQ(h.value().at({0, 0}), 0.5);  // Z3 = a3 = 0.5
  EXPECT_DOUBLE_EQ(h.value().at({0, 1}), 1.5);  // Z4 = a4 = 1.5
  EXPECT_DOUBLE_EQ(o.value().at({0, 0}), 2.5);  // O5
  Var loss = mse_loss(o, target);                // (O5 - Ye)^2, no 1/2
  EXPECT_DOUBLE_EQ(loss.item(), 0.25);
  loss.backward();
  EXPECT_DOUBLE_EQ(output.weight().grad().at({0, 0}), 0.5);  // dL/dW53
  EXPECT_DOUBLE_EQ(output.weight().grad().at({0, 1}), 1.5);  // dL/dW54
  EXPECT_DOUBLE_EQ(output.bias().grad().at({0}), 1.0);
  EXPECT_DOUBLE_EQ(hidden.weight().grad().at({0, 0}), 1.0);
  EXPECT_DOUBLE_EQ(hidden.weight().grad().at({0, 1}), 0.0);  // X2 = 0

  const double lr = 0.01;
  for (Module* m : {static_cast<Module*>(&hidden), static_cast<Module*>(&output)}) {
    for (auto& p : m->parameters()) {
      Var q = p;
      ops::add_(q.mutable_value(), p.grad(), -lr);
    }
  }
  EXPECT_NEAR(output.weight().value().at({0, 0}), 0.995, 1e-15);  // W53
  EXPECT_NEAR(output.weight().value().at({0, 1}), 0.985, 1e-15);  // W54
  EXPECT_NEAR(output.bias().value().at({0}), 0.49, 1e-15);        // b5
  EXPECT_NEAR(hidden.weight().value().at({0, 0}), 0.49, 1e-15);   // W31
  EXPECT_NEAR(hidden.weight().value().at({0, 1}), 0.5, 1e-15);    // W32
  EXPECT_NEAR(hidden.bias().value().at({0}), -0.01, 1e-15);       // b3
  EXPECT_NEAR(hidden.weight().value().at({1, 0}), 0.99, 1e-15);   // W41
  EXPECT_NEAR(hidden.weight().value().at({1, 1}), 1.0, 1e-15);    // W42
  EXPECT_NEAR(hidden.bias().value().at({1}), 0.49, 1e-15);        // b4

  auto [h2, o2] = forward();
  EXPECT_NEAR(h2.value().at({0, 0}), 0.48, 1e-12);
  EXPECT_NEAR(h2.value().at({0, 1}), 1.48, 1e-12);
  EXPECT_NEAR(o2.value().at({0, 0}), 2.4254, 1e-12);
  EXPECT_NEAR(mse_loss(o2, target).item(), 0.18096516, 1e-10);
}

// Seed 002 chapter 2: E = 1/2 (y_hat - y)^2 with y = 1.0, y_hat = 1.7 gives 0.245, and the
// derivative 0.7.
TEST(Golden, HalfMse) {
  Var yhat(Tensor::from_vector(std::vector<double>{1.7}, {1}), true);
  Var y(Tensor::from_vector(std::vector<double>{1.0}, {1}));
  Var e = half_mse_loss(yhat, y);
  EXPECT_NEAR(e.item(), 0.245, 1e-12);
  e.backward();
  EXPECT_NEAR(yhat.grad().item(), 0.7, 1e-12);
}

// Seed 002 chapter 3: sum of exp(logits) 24.813, predicted class probability 0.244, the
// expected class (digit 8) 0.181; cross-entropy -ln 0.181 = 1.709 (not the text's 0.734),
// gradient p - onehot: 0.244 at the predicted neuron, -0.819 at the target.
TEST(Golden, SoftmaxCrossEntropy) {
  const double total = 24.813, e_max = 0.244 * total, e_target = 0.181 * total;
  const double e_other = (total - e_max - e_target) / 8.0;
  std::vector<double> logits(10, std::log(e_other));
  logits[5] = std::log(e_max);
  logits[8] = std::log(e_target);
  Var z(Tensor::from_vector(logits, {1, 10}), true);
  Tensor p = ops::softmax(z.value());
  EXPECT_NEAR(p.at({0, 5}), 0.244, 1e-12);
  EXPECT_NEAR(p.at({0, 8}), 0.181, 1e-12);
  EXPECT_EQ(ops::argmax_rows(p)[0], 5);
  Var loss = cross_entropy(z, {8});
  EXPECT_NEAR(loss.item(), 1.7093, 1e-4);
  EXPECT_NEAR(loss.item(), -std::log(0.181), 1e-12);
  loss.backward();
  EXPECT_NEAR(z.grad().at({0, 5}), 0.244, 1e-12);
  EXPECT_NEAR(z.grad().at({0, 8}), -0.819, 1e-12);
}

// Seed 002 chapter 3: the 784-128-10 MLP has 101,632 weights and 138 biases.
TEST(Golden, ParameterCounts) {
  Rng rng(0);
  auto mlp = make_model("mlp128", rng);
  std::int64_t weights = 0, biases = 0;
  for (auto& [name, v] : mlp->named_parameters()) {
    (name.find("weight") != std::string::npos ? weights : biases) += v.value().numel();
  }
  EXPECT_EQ(weights, 101632);
  EXPECT_EQ(biases, 138);
  EXPECT_EQ(weights * 4, 406528);  // bytes in FP32
  // Seed 003's MNIST CNN: 320 + 18,496 + 1,179,776 + 2,580 + 210.
  EXPECT_EQ(make_model("seed-cnn", rng)->num_parameters(), 1201382);
  // The models.
  EXPECT_EQ(make_model("mlp", rng)->num_parameters(), 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10);
  EXPECT_EQ(make_model("cnn", rng)->num_parameters(), 320 + 18496 + 3136 * 128 + 128 + 1290);
}

// Seed 002 chapter 4: the fully connected head 7,744 -> 4,000 -> 1,000 -> 10 has
// 34,991,010 parameters with biases.
TEST(Golden, ChapterFourClassifierHead) {
  Rng rng(0);
  EXPECT_EQ(make_mlp({7744, 4000, 1000, 10}, rng)->num_parameters(), 34991010);
}
