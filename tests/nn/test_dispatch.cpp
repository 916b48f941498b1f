// weft's own loops give the same bits at every level of run-time dispatch (util/dispatch.h):
// a training step of the GPT (float32 and bf16), the CNN and the LSTM, and the element-wise
// kernels on values that include infinities, NaN and subnormals, run at the baseline and at
// AVX2 (where the processor has it) in one process. The libraries' products do not change
// between the runs (oneDNN's instruction set is fixed once per process), so any difference
// would be weft's loops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "weft/autograd/functions.h"
#include "weft/nn/models.h"
#include "weft/nn/recurrent.h"
#include "weft/nn/transformer.h"
#include "weft/optim/adam.h"
#include "weft/optim/sgd.h"
#include "weft/tensor/ops.h"
#include "weft/tensor/rng.h"
#include "weft/util/cpu.h"
#include "weft/util/half_float.h"

namespace weft {
namespace {

// WEFT_CPU_ISA set for one scope (the loops re-read it); restored after.
class ScopedCpuIsa {
 public:
  explicit ScopedCpuIsa(const char* isa) {
    if (const char* v = std::getenv("WEFT_CPU_ISA")) previous_ = v;
    ::setenv("WEFT_CPU_ISA", isa, 1);
    cpu::reload();
  }
  ~ScopedCpuIsa() {
    if (previous_)
      ::setenv("WEFT_CPU_ISA", previous_->c_str(), 1);
    else
      ::unsetenv("WEFT_CPU_ISA");
    cpu::reload();
  }

 private:
  std::optional<std::string> previous_;
};

using Outputs = std::vector<Tensor>;

// fn's outputs at each level this processor runs, each checked bitwise against the baseline's.
void expect_same_bits_at_every_level(const std::function<Outputs()>& fn) {
  Outputs baseline;
  {
    ScopedCpuIsa isa("sse41");
    ASSERT_EQ(cpu::loop_level(), cpu::Level::kBaseline);
    baseline = fn();
  }
  if (cpu::processor_level() < cpu::Level::kAvx2)
    GTEST_SKIP() << "this processor has no AVX2: one level only";
  ScopedCpuIsa isa("avx2");
  ASSERT_EQ(cpu::loop_level(), cpu::Level::kAvx2);
  const Outputs wide = fn();
  ASSERT_EQ(wide.size(), baseline.size());
  for (std::size_t i = 0; i < wide.size(); ++i)
    EXPECT_TRUE(ops::equal(wide[i], baseline[i]))
        << "output " << i << " differs by up to " << ops::max_abs_diff(wide[i], baseline[i]);
}

// Every parameter and its gradient, after one step of `opt`.
template <class Model, class Opt>
Outputs step_outputs(Model& model, Opt& opt, const std::function<Var()>& loss) {
  opt.zero_grad();
  Var l = loss();
  l.backward();
  Outputs out{l.value()};
  for (auto& [name, p] : model.named_parameters()) out.push_back(p.grad().clone());
  opt.step();
  for (auto& [name, p] : model.named_parameters()) out.push_back(p.value().clone());
  return out;
}

std::vector<std::int32_t> tokens(std::int64_t n, std::int64_t vocab) {
  std::vector<std::int32_t> t;
  for (std::int64_t i = 0; i < n; ++i) t.push_back(static_cast<std::int32_t>((i * 7 + 3) % vocab));
  return t;
}

Tensor ids_of(const std::vector<std::int32_t>& t, std::int64_t rows) {
  const auto cols = static_cast<std::int64_t>(t.size()) / rows;
  Tensor ids = Tensor::empty({rows, cols});
  for (std::int64_t i = 0; i < rows * cols; ++i)
    ids.set({i / cols, i % cols}, t[static_cast<std::size_t>(i)]);
  return ids;
}

TEST(Dispatch, TheGptStepIsBitwiseTheSameAtEveryLevel) {
  for (const bool bf16 : {false, true}) {
    expect_same_bits_at_every_level([&] {
      Rng rng(3);
      GPT gpt(GptConfig{40, 16, 32, 2, 4, Positional::kLearned, true}, rng);
      AdamOptions o;
      o.weight_decay = 0.1;
      o.decoupled = true;
      Adam opt(gpt.named_parameters(), 1e-3, o);
      const auto next = tokens(2 * 16 + 1, 40);
      const Tensor ids = ids_of(std::vector<std::int32_t>(next.begin(), next.end() - 1), 2);
      const std::vector<std::int32_t> targets(next.begin() + 1, next.end());
      Bf16Guard precision(bf16);
      return step_outputs(gpt, opt, [&] {
        return cross_entropy(reshape(gpt.forward(Var(ids)), {32, 40}), targets);
      });
    });
  }
}

TEST(Dispatch, TheCnnAndLstmStepsAreBitwiseTheSameAtEveryLevel) {
  expect_same_bits_at_every_level([] {
    Rng rng(5);
    auto cnn = make_model("cnn", rng);
    SGD opt(cnn->named_parameters(), 0.01, 0.9, 1e-4);
    Tensor images = Tensor::empty({4, 1, 28, 28});
    for (std::int64_t i = 0; i < images.numel(); ++i)
      images.data<float>()[i] = static_cast<float>(rng.uniform());
    return step_outputs(*cnn, opt, [&] {
      return cross_entropy(cnn->forward(Var(images)), {1, 7, 3, 9});
    });
  });
  expect_same_bits_at_every_level([] {
    Rng rng(6);
    RecurrentLM lstm(RecurrentConfig{40, 16, 32, 2, "lstm"}, rng);
    Adam opt(lstm.named_parameters(), 1e-3);
    const std::int64_t v = lstm.vocab(), t = std::min<std::int64_t>(lstm.context(), 8);
    const auto next = tokens(2 * t + 1, v);
    const Tensor ids = ids_of(std::vector<std::int32_t>(next.begin(), next.end() - 1), 2);
    const std::vector<std::int32_t> targets(next.begin() + 1, next.end());
    return step_outputs(lstm, opt, [&] {
      return cross_entropy(reshape(lstm.forward(Var(ids)), {2 * t, v}), targets);
    });
  });
}

TEST(Dispatch, ElementWiseKernelsAreBitwiseTheSameAtEveryLevelOnEveryKindOfValue) {
  // Ordinary values, large and small ones, infinities, NaN and subnormals, in a length that
  // leaves a remainder after every vector width.
  std::vector<float> values;
  Rng rng(7);
  for (int i = 0; i < 1021; ++i) values.push_back(static_cast<float>((rng.uniform() - 0.5) * 20.0));
  for (float v : {100.0f, -100.0f, 88.0f, -88.0f, 1e-40f, -1e-40f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), 0.0f, -0.0f})
    values.push_back(v);
  const auto n = static_cast<std::int64_t>(values.size());
  const Tensor a = Tensor::from_vector(values, {n});
  const Tensor rows = ops::mul(a.slice(0, 0, 1024).reshape({32, 32}), 0.5);
  expect_same_bits_at_every_level([&] {
    Outputs out{ops::exp(a),
                ops::tanh(a),
                ops::sigmoid(a),
                ops::relu(a),
                ops::square(a),
                ops::add(a, a),
                ops::mul(a, 3.0),
                ops::div(a, ops::add(a, 1.5)),
                ops::softmax(rows),
                ops::log_softmax(rows),
                ops::sum(rows, {0}, false),
                ops::add(rows, rows.slice(0, 0, 1)),
                ops::round_bf16(a),
                a.to(DType::F64)};
    // float16 conversions many at once (F16C at AVX2), NaN's payload aside.
    std::vector<std::uint16_t> half(values.size());
    f16_from_floats(values.data(), half.data(), values.size());
    std::vector<float> back(values.size());
    floats_from_f16(half.data(), back.data(), values.size());
    Tensor t = Tensor::empty({n});
    for (std::int64_t i = 0; i < n; ++i) t.data<float>()[i] = std::isnan(back[i]) ? 0.0f : back[i];
    out.push_back(t);
    return out;
  });
}

}  // namespace
}  // namespace weft
