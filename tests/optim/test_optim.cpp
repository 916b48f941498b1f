#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

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

// Adam with its state offloaded to a file (optim/state_store.h) takes the very steps of Adam
// in memory, over parameters of different sizes, some without a gradient on some steps (the
// store skips what it read ahead for them), and its state round-trips through state().
TEST(StateStore, OffloadedAdamEqualsAdamInMemory) {
  auto make = [] {
    std::vector<std::pair<std::string, Var>> ps;
    Rng rng(3);
    for (int i = 0; i < 7; ++i) {
      const std::int64_t n = 1 + (i * 37) % 300;
      std::string name = "p";  // (built in pieces: GCC 12 warns falsely about "p" + to_string)
      name += std::to_string(i);
      ps.emplace_back(name, Var(randn({n}, rng), true));
    }
    return ps;
  };
  auto a = make(), b = make();
  Adam memory(a, 0.01), offloaded(b, 0.01);
  const std::string dir = std::filesystem::temp_directory_path().string();
  offloaded.offload_state(dir, 2);
  EXPECT_LT(offloaded.state_resident_bytes(), offloaded.state_total_bytes());
  Rng rng(9);
  for (int step = 0; step < 6; ++step) {
    for (std::size_t i = 0; i < a.size(); ++i) {
      if ((step + static_cast<int>(i)) % 3 == 0) {  // no gradient this step
        a[i].second.set_grad(Tensor());
        b[i].second.set_grad(Tensor());
        continue;
      }
      Tensor g = randn(a[i].second.shape(), rng);
      a[i].second.set_grad(g);
      b[i].second.set_grad(g.clone());
    }
    memory.step();
    offloaded.step();
  }
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(ops::equal(a[i].second.value(), b[i].second.value())) << i;
  const StateDict sa = memory.state(), sb = offloaded.state();
  ASSERT_EQ(sa.size(), sb.size());
  for (std::size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].first, sb[i].first);
    EXPECT_TRUE(ops::equal(sa[i].second, sb[i].second)) << sa[i].first;
  }
  // Loaded back (a checkpoint's state) into a fresh offloaded optimizer: the same state.
  auto c = make();
  Adam restored(c, 0.01);
  restored.offload_state(dir);
  restored.load_state(sa);
  const StateDict sc = restored.state();
  for (std::size_t i = 0; i < sa.size(); ++i) EXPECT_TRUE(ops::equal(sa[i].second, sc[i].second)) << sa[i].first;
}

// Passes in any order, with fewer entries than slots and unchanged releases (parameter
// offload's forward and backward passes): every value comes back as written, and no pass
// waits forever for a read (a read queued as the order ran out once never woke the I/O thread).
TEST(StateStore, PassesInAnyOrderReadWhatWasWritten) {
  StateStore store(std::vector<Shape>{{2009}, {657}, {25}}, DType::F32, 1);
  store.offload(std::filesystem::temp_directory_path().string(), 3, "parameters");
  for (std::size_t k = 0; k < 3; ++k) store.write(k, 0, Tensor::full({store.shape(k)[0]}, static_cast<float>(k)));
  for (int step = 1; step <= 4; ++step) {
    store.begin_pass({0, 1});  // forward: read, unchanged
    for (std::size_t k : {0, 1}) {
      EXPECT_EQ(store.acquire(k)[0].data<float>()[0], static_cast<float>(k + 10 * (step - 1))) << step;
      store.release(k, false);
    }
    store.end_pass();
    store.begin_pass({2, 1, 0});  // backward: each changed and written back
    for (std::size_t k : {2, 1, 0}) {
      Tensor* t = store.acquire(k);
      ops::add_(t[0], Tensor::full(store.shape(k), 10.0));
      store.release(k);
    }
    store.end_pass();
  }
  for (std::size_t k = 0; k < 3; ++k) EXPECT_EQ(store.read(k, 0).data<float>()[store.shape(k)[0] - 1], k + 40.0f);
}

TEST(StateStore, ABadFolderIsOneError) {
  auto p = one_param(1.0, 0.5);
  Adam opt(p, 0.01);
  try {
    opt.offload_state("/nonexistent/folder");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot create /nonexistent/folder/weft-optimizer-"), std::string::npos) << e.what();
  }
}
