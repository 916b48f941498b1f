// The planner's own predictions (no rate given) against the training runs papers published
// (weft/plan/published_runs.h). Each system's constants (its GEMM efficiency; DeepSpeed's
// per-collective cost) are fitted on its other runs, then the run is predicted
// (leave-one-out): what the planner would have said before the run was measured.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "weft/plan/published_runs.h"
#include "weft/util/error.h"

using namespace weft::plan;

TEST(PublishedRuns, HeldOutPredictionsWithinTheirBounds) {
  // Held-out error bounds per system (docs/planning.md, "Predicted against published runs"):
  // Megatron-LM 2022 and the Llama 3 stack within 5% on every run; Megatron-LM 2021 within
  // 7% (15 of its 16 runs within 5%: the 76.1B row misses); DeepSpeed's ZeRO-3 within 9%
  // (4 of 6 within 5%: its two runs bound by compute, four sequences per GPU, differ by less
  // than the planner's kernels for their widths do).
  const std::map<std::string, double> bound = {{"Megatron-LM 2021", 0.07},
                                               {"DeepSpeed ZeRO-3 2021", 0.09},
                                               {"Megatron-LM 2022", 0.05},
                                               {"Meta's Llama 3 stack 2024", 0.05}};
  int held = 0, within_5 = 0;
  for (const PublishedPrediction& p : predict_published_runs()) {
    std::printf("%-26s %-48s paper %8.3f s  held out: %.3f, %4.1f ms -> %8.3f s %+6.1f%%  (all: %+6.1f%%)%s\n",
                p.run.system.c_str(), p.run.label.c_str(), p.run.iteration_s, p.held_out.gemm_efficiency,
                1e3 * p.held_out.collective_overhead_s, p.held_out_s, 100 * p.held_out_error(), 100 * p.fitted_error(),
                p.run.not_held.empty() ? "" : "  not held");
    ASSERT_TRUE(bound.count(p.run.system)) << p.run.system;
    if (!p.run.not_held.empty()) continue;
    ++held;
    within_5 += std::abs(p.held_out_error()) < 0.05 ? 1 : 0;
    EXPECT_LT(std::abs(p.held_out_error()), bound.at(p.run.system)) << p.run.source << ", " << p.run.label;
    // Fitted on all of its system's runs, no run is off by more than the held-out bound.
    EXPECT_LT(std::abs(p.fitted_error()), bound.at(p.run.system)) << p.run.source << ", " << p.run.label;
  }
  EXPECT_EQ(held, 32);
  EXPECT_GE(within_5, 29);
}

// The fit is what it says: at the fitted GEMM efficiency the largest over- and
// under-estimates balance, and any other efficiency makes the worst error larger.
TEST(PublishedRuns, FitIsTheMinimax) {
  std::vector<PublishedRun> megatron;
  for (const PublishedRun& r : published_runs())
    if (r.system == "Megatron-LM 2022") megatron.push_back(r);
  ASSERT_EQ(megatron.size(), 8u);
  const SystemFit fit = fit_system(megatron);
  const auto worst = [&](double e) {
    double w = 0;
    for (const PublishedRun& r : megatron) w = std::max(w, std::abs(predicted_iteration_seconds(r, {e, 0}) / r.iteration_s - 1));
    return w;
  };
  EXPECT_LT(worst(fit.gemm_efficiency), worst(fit.gemm_efficiency * 0.98));
  EXPECT_LT(worst(fit.gemm_efficiency), worst(fit.gemm_efficiency * 1.02));
  EXPECT_GT(fit.gemm_efficiency, 0.5);
  EXPECT_LT(fit.gemm_efficiency, 1.0);
}

// One measured run calibrates the planner (weft plan --fit-to): the fitted efficiency gives
// back the measured iteration, and a time the model cannot reach is refused.
TEST(PublishedRuns, FitToOneMeasuredRun) {
  const PublishedRun run = published_runs().front();
  const double e = fit_gemm_efficiency_to(run.input, run.iteration_s);
  EXPECT_NEAR(predicted_iteration_seconds(run, {e, 0}) / run.iteration_s, 1.0, 1e-3);
  EXPECT_THROW(fit_gemm_efficiency_to(run.input, run.iteration_s / 100), weft::ConfigError);
  EXPECT_THROW(fit_gemm_efficiency_to(run.input, run.iteration_s * 100), weft::ConfigError);
  EXPECT_THROW(fit_gemm_efficiency_to(run.input, 0), weft::ConfigError);
}

#include "weft/plan/layer_kernels.h"

// A layer's kernels: their GEMM FLOPs are the planner's count (6 x the layer's weights
// multiplied, forward and backward, plus the attention's 12 s d per token), and a GEMM's
// efficiency follows its shape: whole waves of full tiles reach the large-GEMM share, one
// tile more than a wave about half, a short inner dimension less.
TEST(LayerKernels, FlopsAndShapes) {
  TransformerSpec m = preset("gpt3-175b");
  Layout l;
  l.tp = 8, l.micro_batch = 2;
  const LayerKernels k = layer_kernels(m, l);
  double flops = 0;
  for (const auto* list : {&k.forward, &k.backward})
    for (const Kernel& x : *list) flops += x.flops;
  const double tokens = 2048.0 * 2, d = 12288;
  const double weights = 12 * d * d;  // QKV, output, MLP up and down (no biases, no norms)
  EXPECT_NEAR(flops / (tokens / 8 * (6 * weights + 12 * d * 2048)), 1.0, 1e-3);  // (the QKV biases: 1e-4)
  KernelRates r;
  r.sms = 108, r.gemm_efficiency = 0.8;
  Kernel full;
  full.gemm = true, full.m = 256 * 12, full.n = 128 * 9, full.k = 4096, full.batch = 1;  // 108 tiles: one wave
  EXPECT_NEAR(gemm_shape_efficiency(full, r), 0.8 * 4096 / (4096 + 64), 1e-12);
  Kernel over = full;
  over.n = 128 * 9 + 128;  // 120 tiles of 256 x 128: two waves, the second mostly idle
  EXPECT_LT(gemm_shape_efficiency(over, r), 0.8 * gemm_shape_efficiency(full, r));
  Kernel short_k = full;
  short_k.k = 64;
  EXPECT_NEAR(gemm_shape_efficiency(short_k, r), 0.8 * 0.5, 1e-12);
  // The time of a kernel: never faster than its operands move (a GEMM with k = 1 is bound by memory).
  r.memory_bandwidth = 2e12;
  Kernel thin = full;
  thin.k = 1, thin.flops = 2 * thin.m * thin.n;
  EXPECT_GE(kernel_seconds(thin, r), 2 * thin.m * thin.n / (2e12 * r.memory_efficiency));
}
