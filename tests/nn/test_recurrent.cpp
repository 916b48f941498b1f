// Recurrent layers: outputs against PyTorch's nn.LSTM / nn.RNN for fixed weights, the seed
// variant's equations, gradients of inputs and weights (backpropagation through time)
// against finite differences in double, and a recurrent language model that learns.
#include <gtest/gtest.h>

#include <cmath>

#include "weft/autograd/functions.h"
#include "weft/autograd/gradcheck.h"
#include "weft/nn/recurrent.h"
#include "cycle_task.h"
#include "weft/tensor/ops.h"

using namespace weft;

namespace {
// 0.5·sin(a·n + b) for the n-th element: the pattern the PyTorch references were made with.
Tensor pattern(const Shape& shape, double a, double b) {
  Tensor t = Tensor::empty(shape, DType::F64);
  double* p = t.data<double>();
  for (std::int64_t n = 0; n < t.numel(); ++n) p[n] = 0.5 * std::sin(a * static_cast<double>(n) + b);
  return t;
}

void set(Module& m, const std::string& name, const Tensor& value) {
  for (auto& [n, p] : m.named_parameters()) {
    if (n == name) {
      Var q = p;
      q.mutable_value() = value;
      return;
    }
  }
  FAIL() << "no parameter " << name;
}

void to_double(Module& m) {
  for (auto& p : m.parameters()) {
    Var q = p;
    q.mutable_value() = q.value().to(DType::F64);
  }
}

// Every weight's gradient from backward() against central differences of sum(f() · R).
void check_weight_gradients(Module& m, const Tensor& x) {
  Rng rng(11);
  Tensor r;
  auto loss = [&] {
    Var out = m.forward(Var(x));
    if (!r.defined()) r = randn(out.shape(), rng, 0, 1, DType::F64);
    return sum(mul(out, Var(r)));
  };
  m.zero_grad();
  loss().backward();
  for (auto& [name, p] : m.named_parameters()) {
    Var q = p;
    double* w = q.mutable_value().data<double>();
    const Tensor g = q.grad();
    for (std::int64_t i = 0; i < q.value().numel(); ++i) {
      const double saved = w[i], eps = 1e-6;
      NoGradGuard no_grad;
      w[i] = saved + eps;
      const double up = loss().item();
      w[i] = saved - eps;
      const double down = loss().item();
      w[i] = saved;
      const double numeric = (up - down) / (2 * eps), analytic = g.data<double>()[i];
      ASSERT_NEAR(analytic, numeric, 1e-6 + 1e-4 * std::fabs(numeric)) << name << "[" << i << "]";
    }
  }
}
}  // namespace

TEST(Recurrent, LstmMatchesPyTorch) {
  // torch.nn.LSTM(3, 2, batch_first=True), weights 0.5·sin(a·n + b), bias_hh = 0.
  Rng rng(1);
  LSTM lstm(3, 2, rng);
  set(lstm, "weight_ih", pattern({8, 3}, 0.37, 0.2));
  set(lstm, "weight_hh", pattern({8, 2}, 0.51, 0.3));
  set(lstm, "bias", pattern({8}, 0.23, 0.4));
  Tensor out = lstm.forward(Var(pattern({1, 3, 3}, 0.9, 0.1))).value();
  const std::vector<double> torch{0.0321068316, 0.2106652369, 0.1639430886, 0.2246663829, 0.2201215552, 0.3129151225};
  auto got = out.to_vector();
  ASSERT_EQ(out.shape(), (Shape{1, 3, 2}));
  for (size_t i = 0; i < torch.size(); ++i) EXPECT_NEAR(got[i], torch[i], 1e-9) << i;
}

TEST(Recurrent, RnnMatchesPyTorch) {
  Rng rng(1);
  RNN rnn(3, 2, rng);
  set(rnn, "weight_ih", pattern({2, 3}, 0.37, 0.2));
  set(rnn, "weight_hh", pattern({2, 2}, 0.51, 0.3));
  set(rnn, "bias", pattern({2}, 0.23, 0.4));
  auto got = rnn.forward(Var(pattern({1, 3, 3}, 0.9, 0.1))).value().to_vector();
  const std::vector<double> torch{0.4654427138, 0.627771216, 0.2311171896, 0.5021801596, 0.5102707432, 0.6020920767};
  for (size_t i = 0; i < torch.size(); ++i) EXPECT_NEAR(got[i], torch[i], 1e-9) << i;
}

TEST(Recurrent, SeedLstmFollowsChapterSixEquations) {
  // f, i, o = σ(·); g = ReLU(·); C = f⊙C' + i⊙g; h = o⊙ReLU(C); no biases.
  Rng rng(2);
  LSTM lstm(2, 1, rng, LstmVariant::kReluNoBias);
  EXPECT_EQ(lstm.num_parameters(), 4 * 2 + 4 * 1);
  set(lstm, "weight_ih", Tensor::from_vector(std::vector<double>{0.5, -1.0, 1.0, 0.5, 2.0, 1.0, -0.5, 1.5}, {4, 2}));
  set(lstm, "weight_hh", Tensor::from_vector(std::vector<double>{0.3, -0.2, 0.7, 1.1}, {4, 1}));
  Tensor x = Tensor::from_vector(std::vector<double>{1.0, 0.5, -1.0, 2.0}, {1, 2, 2});
  auto got = lstm.forward(Var(x)).value().to_vector();
  auto sig = [](double z) { return 1 / (1 + std::exp(-z)); };
  auto relu = [](double z) { return z > 0 ? z : 0.0; };
  double h = 0, c = 0;
  const double wi[4][2] = {{0.5, -1.0}, {1.0, 0.5}, {2.0, 1.0}, {-0.5, 1.5}}, wh[4] = {0.3, -0.2, 0.7, 1.1};
  const double xs[2][2] = {{1.0, 0.5}, {-1.0, 2.0}};
  for (int t = 0; t < 2; ++t) {
    double z[4];
    for (int k = 0; k < 4; ++k) z[k] = wi[k][0] * xs[t][0] + wi[k][1] * xs[t][1] + wh[k] * h;
    c = sig(z[1]) * c + sig(z[0]) * relu(z[2]);
    h = sig(z[3]) * relu(c);
    EXPECT_NEAR(got[static_cast<size_t>(t)], h, 1e-12) << "step " << t;
  }
}

TEST(Recurrent, GradientsThroughTimeCheckInDouble) {
  Rng rng(5);
  Tensor x = randn({2, 4, 3}, rng, 0, 1, DType::F64);
  LSTM standard(3, 4, rng), seed(3, 4, rng, LstmVariant::kReluNoBias);
  RNN tanh_rnn(3, 4, rng), sigmoid_rnn(3, 4, rng, RnnActivation::kSigmoid);
  for (Module* m : {static_cast<Module*>(&standard), static_cast<Module*>(&seed), static_cast<Module*>(&tanh_rnn),
                    static_cast<Module*>(&sigmoid_rnn)}) {
    SCOPED_TRACE(m->describe());
    to_double(*m);
    GradcheckResult r = gradcheck([&](const std::vector<Var>& v) { return m->forward(v[0]); }, {x});
    EXPECT_TRUE(r.ok) << r.message;
    check_weight_gradients(*m, x);
  }
}

TEST(Recurrent, LanguageModelShapesCountsAndLearning) {
  Rng rng(6);
  RecurrentLM lm(RecurrentConfig{6, 12, 16, 2, "lstm"}, rng);
  // embedding 6·16, two layers of 4·16·(16 + 16) + 4·16, head 16·6 + 6
  EXPECT_EQ(lm.num_parameters(), 6 * 16 + 2 * (4 * 16 * 32 + 64) + 16 * 6 + 6);
  EXPECT_THROW(RecurrentLM(RecurrentConfig{6, 12, 16, 2, "gru"}, rng), ConfigError);
  const auto [first, last] = weft::testing::train_on_cycle(lm, 1e-2);
  EXPECT_GT(first, 1.0);
  EXPECT_LT(last, 0.1);
  EXPECT_EQ(lm.generate({1, 2, 3}, 5, 0.0, 0, rng), (std::vector<std::int32_t>{1, 2, 3, 4, 5, 0, 1, 2}));
}
