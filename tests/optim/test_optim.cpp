#include <gtest/gtest.h>

#include <cmath>

#include "weft/autograd/functions.h"
#include "weft/optim/adam.h"
#include "weft/optim/schedule.h"
#include "weft/optim/sgd.h"
#include "weft/tensor/ops.h"

using namespace weft;

namespace {
std::vector<std::pair<std::string, Var>> one_param(double w0, double grad) {
  Var w(Tensor::from_vector(std::vector<double>{w0}, {1}), true);
  w.set_grad(Tensor::from_vector(std::vector<double>{grad}, {1}));
  return {{"w", w}};
}
}  // namespace

TEST(SGD, PlainStep) {
  auto p = one_param(1.0, 0.5);
  SGD opt(p, 0.01);
  opt.step();
  EXPECT_DOUBLE_EQ(p[0].second.value().item(), 1.0 - 0.01 * 0.5);
}

TEST(SGD, MomentumAndWeightDecayMatchHandComputation) {
  auto p = one_param(1.0, 0.5);
  SGD opt(p, 0.1, 0.9, 0.01);
  double w = 1.0, buf = 0.0;
  for (int i = 0; i < 5; ++i) {
    double g = 0.5 + 0.1 * i;
    p[0].second.set_grad(Tensor::from_vector(std::vector<double>{g}, {1}));
    opt.step();
    double d = g + 0.01 * w;
    buf = 0.9 * buf + d;
    w -= 0.1 * buf;
    EXPECT_NEAR(p[0].second.value().item(), w, 1e-15) << i;
  }
  EXPECT_EQ(opt.steps(), 5);
  // The momentum buffer survives a state round trip.
  auto q = one_param(w, 0.3);
  SGD restored(q, 0.1, 0.9, 0.01);
  restored.load_state(opt.state());
  p[0].second.set_grad(Tensor::from_vector(std::vector<double>{0.3}, {1}));
  opt.step();
  restored.step();
  EXPECT_DOUBLE_EQ(p[0].second.value().item(), q[0].second.value().item());
}

TEST(SGD, RejectsBadSettings) {
  EXPECT_THROW(SGD(one_param(0, 0), 0.0), ConfigError);
  EXPECT_THROW(SGD(one_param(0, 0), 0.1, 1.0), ConfigError);
  EXPECT_THROW(SGD(one_param(0, 0), 0.1, 0.9, -1.0), ConfigError);
  SGD opt(one_param(0, 0), 0.1, 0.9);
  EXPECT_THROW(opt.load_state({{"momentum.other", Tensor::zeros({1}, DType::F64)}}), CheckpointError);
}

TEST(Adam, MatchesHandComputation) {
  for (bool decoupled : {false, true}) {
    auto p = one_param(1.0, 0.0);
    AdamOptions o;
    o.weight_decay = 0.1;
    o.decoupled = decoupled;
    Adam opt(p, 0.01, o);
    double w = 1.0, m = 0, v = 0;
    for (int t = 1; t <= 4; ++t) {
      double g = 0.3 * t - 0.5;
      p[0].second.set_grad(Tensor::from_vector(std::vector<double>{g}, {1}));
      opt.step();
      if (decoupled) {
        w *= 1 - 0.01 * 0.1;
      } else {
        g += 0.1 * w;
      }
      m = 0.9 * m + 0.1 * g;
      v = 0.999 * v + 0.001 * g * g;
      double mhat = m / (1 - std::pow(0.9, t)), vhat = v / (1 - std::pow(0.999, t));
      w -= 0.01 * mhat / (std::sqrt(vhat) + 1e-8);
      EXPECT_NEAR(p[0].second.value().item(), w, 1e-14) << "t=" << t << " decoupled=" << decoupled;
    }
    EXPECT_EQ(opt.name(), decoupled ? "adamw" : "adam");
    EXPECT_EQ(opt.state().size(), 2u);
  }
}

TEST(Optimizers, MinimizeAQuadratic) {
  // f(w) = |w - 3|^2 over a vector: every optimizer gets close to 3.
  for (int kind = 0; kind < 3; ++kind) {
    Var w(Tensor::zeros({4}, DType::F64), true);
    std::vector<std::pair<std::string, Var>> params{{"w", w}};
    std::unique_ptr<Optimizer> opt;
    if (kind == 0) opt = std::make_unique<SGD>(params, 0.1, 0.5);
    if (kind == 1) opt = std::make_unique<Adam>(params, 0.1);
    if (kind == 2) opt = std::make_unique<Adam>(params, 0.1, AdamOptions{0.9, 0.999, 1e-8, 0.0, true});
    Var three(Tensor::full({4}, 3.0, DType::F64));
    for (int i = 0; i < 300; ++i) {
      opt->zero_grad();
      Var d = sub(w, three);
      sum(mul(d, d)).backward();
      opt->step();
    }
    for (double v : w.value().to_vector()) EXPECT_NEAR(v, 3.0, 1e-2) << kind;
  }
}

TEST(Schedule, ConstantStepCosineWarmup) {
  Schedule s;
  EXPECT_DOUBLE_EQ(learning_rate(s, 0.1, 1000), 0.1);
  s.kind = "step";
  s.step_size = 10;
  s.gamma = 0.5;
  EXPECT_DOUBLE_EQ(learning_rate(s, 0.1, 9), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(s, 0.1, 10), 0.05);
  EXPECT_DOUBLE_EQ(learning_rate(s, 0.1, 25), 0.025);
  s = Schedule{};
  s.kind = "cosine";
  s.total_steps = 100;
  s.min_lr = 0.001;
  EXPECT_DOUBLE_EQ(learning_rate(s, 0.1, 0), 0.1);
  EXPECT_NEAR(learning_rate(s, 0.1, 50), 0.001 + 0.099 * 0.5, 1e-15);
  EXPECT_NEAR(learning_rate(s, 0.1, 100), 0.001, 1e-15);
  s.warmup_steps = 10;
  EXPECT_NEAR(learning_rate(s, 0.1, 0), 0.01, 1e-15);
  EXPECT_NEAR(learning_rate(s, 0.1, 9), 0.1, 1e-15);
  EXPECT_NEAR(learning_rate(s, 0.1, 10), 0.1, 1e-15);
  EXPECT_NEAR(learning_rate(s, 0.1, 55), 0.001 + 0.099 * 0.5, 1e-15);
  s.kind = "exponential";
  EXPECT_THROW(validate(s), ConfigError);
}
