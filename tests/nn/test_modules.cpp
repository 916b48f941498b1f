#include <gtest/gtest.h>

#include <cmath>

#include "weft/autograd/functions.h"
#include "weft/nn/activation.h"
#include "weft/nn/conv.h"
#include "weft/nn/dropout.h"
#include "weft/tensor/allocator.h"
#include "weft/nn/init.h"
#include "weft/nn/linear.h"
#include "weft/nn/models.h"
#include "weft/tensor/ops.h"

using namespace weft;

TEST(Module, ParameterNamesFollowTheTree) {
  Rng rng(0);
  auto cnn = make_model("cnn", rng);
  std::vector<std::string> names;
  for (auto& [n, v] : cnn->named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "3.weight", "3.bias", "7.weight", "7.bias",
                                             "9.weight", "9.bias"}));
  EXPECT_NE(cnn->summary().find("Conv2d(1 -> 32, 3x3, stride 1, padding 1)"), std::string::npos);
}

TEST(Module, StateDictRoundTripAndMismatches) {
  Rng a(1), b(2);
  auto m1 = make_model("mlp", a);
  auto m2 = make_model("mlp", b);
  EXPECT_FALSE(ops::equal(m1->parameters()[0].value(), m2->parameters()[0].value()));
  m2->load_state_dict(m1->state_dict());
  for (size_t i = 0; i < m1->parameters().size(); ++i)
    EXPECT_TRUE(ops::equal(m1->parameters()[i].value(), m2->parameters()[i].value()));
  Rng c(3);
  auto cnn = make_model("cnn", c);
  EXPECT_THROW(cnn->load_state_dict(m1->state_dict()), CheckpointError);
  StateDict extra = m1->state_dict();
  extra.emplace_back("bogus", Tensor::zeros({1}));
  EXPECT_THROW(m2->load_state_dict(extra), CheckpointError);
  StateDict wrong = m1->state_dict();
  wrong[0].second = Tensor::zeros({3, 3});
  EXPECT_THROW(m2->load_state_dict(wrong), CheckpointError);
}

TEST(Module, ForwardShapes) {
  Rng rng(4);
  for (const auto& name : model_names()) {
    auto m = make_model(name, rng);
    Var y = m->forward(Var(randn({3, 1, 28, 28}, rng)));
    EXPECT_EQ(y.shape(), (Shape{3, 10})) << name;
  }
  EXPECT_THROW(make_model("resnet", rng), ConfigError);
}

TEST(Init, KaimingAndXavierStatistics) {
  Rng rng(5);
  Tensor w = Tensor::empty({512, 400});
  kaiming_normal_(w, rng);
  double var = ops::mean(ops::square(w)).item();
  EXPECT_NEAR(var, 2.0 / 400.0, 0.05 * 2.0 / 400.0);
  Tensor c = Tensor::empty({64, 32, 3, 3});
  EXPECT_EQ(fan_in(c.shape()), 288);
  EXPECT_EQ(fan_out(c.shape()), 576);
  xavier_uniform_(w, rng);
  EXPECT_NEAR(ops::mean(ops::square(w)).item(), 2.0 / 912.0, 0.05 * 2.0 / 912.0);
  xavier_normal_(w, rng);
  EXPECT_NEAR(ops::mean(ops::square(w)).item(), 2.0 / 912.0, 0.05 * 2.0 / 912.0);
}

TEST(Layers, DropoutTrainAndEval) {
  Dropout d(0.5, 11);
  Var x(Tensor::ones({10000}));
  Var y = d(x);
  double kept = 0;
  for (double v : y.value().to_vector()) {
    ASSERT_TRUE(v == 0.0 || v == 2.0);
    kept += v > 0;
  }
  EXPECT_NEAR(kept / 10000, 0.5, 0.03);
  d.eval();
  EXPECT_TRUE(ops::equal(d(x).value(), x.value()));
  EXPECT_EQ(d.named_rngs().size(), 1u);
  EXPECT_THROW(Dropout(1.0, 0), ConfigError);
}

// dropout is x times the mask the generator draws in order (0, or 1/(1-p) with probability
// 1-p), values and gradients bit for bit, and keeps a byte per element for backward.
TEST(Layers, DropoutIsTheDrawnMaskTimesTheInput) {
  Rng data(3);
  Tensor xv = randn({37, 129}, data);
  xv.set({1, 2}, std::nan(""));
  const double p = 0.3;
  Rng draw(21), again(21);
  Tensor mask = Tensor::empty(xv.shape());
  for (std::int64_t i = 0; i < mask.numel(); ++i)
    mask.data<float>()[i] = again.uniform() < p ? 0.0f : static_cast<float>(1.0 / (1.0 - p));
  Var x(xv, true);
  const std::size_t before = allocator_live_bytes();
  Var y = dropout(x, p, draw);
  EXPECT_LE(allocator_live_bytes() - before, y.value().nbytes() + 37u * 129u + 1024u);
  const Tensor want = ops::mul(xv, mask);
  EXPECT_TRUE(ops::equal(y.value().slice(0, 2, 37).contiguous(), want.slice(0, 2, 37).contiguous()));
  EXPECT_TRUE(std::isnan(y.value().at({1, 2})));
  Tensor g = randn(xv.shape(), data);
  y.backward(g);
  EXPECT_TRUE(ops::equal(x.grad(), ops::mul(g, mask)));
  EXPECT_EQ(draw.uniform(), again.uniform());  // both drew one number per element
}

TEST(Layers, ActivationsAndSoftmaxModules) {
  Var x(Tensor::from_vector(std::vector<float>{-1, 0, 2}, {1, 3}));
  EXPECT_EQ(ReLU()(x).value().to_vector(), (std::vector<double>{0, 0, 2}));
  EXPECT_NEAR(Tanh()(x).value().at({0, 2}), std::tanh(2.0), 1e-6);
  EXPECT_NEAR(Sigmoid()(x).value().at({0, 0}), 1 / (1 + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(ops::sum(Softmax()(x).value()).item(), 1.0, 1e-6);
  EXPECT_NEAR(LogSoftmax()(x).value().at({0, 2}), std::log(ops::softmax(x.value()).at({0, 2})), 1e-6);
}

TEST(Layers, ConvStackShapesFromSeed002Chapter4) {
  // 96x96x3 -> 8 kernels 3x3 -> 94x94 -> pool -> 47x47 -> 16 kernels -> 45x45 -> pool -> 22x22.
  Rng rng(6);
  Conv2d c1(3, 8, 3, rng), c2(8, 16, 3, rng);
  MaxPool2d p(2);
  Var h = p(c1(Var(randn({1, 3, 96, 96}, rng))));
  EXPECT_EQ(h.shape(), (Shape{1, 8, 47, 47}));
  h = p(c2(h));
  EXPECT_EQ(h.shape(), (Shape{1, 16, 22, 22}));
  EXPECT_EQ(Flatten()(h).shape(), (Shape{1, 7744}));
}
