// weft plan: one planned job, computed from a model, a cluster and a parallel layout, with
// the assumptions behind every figure. Printed as a table or as JSON (weft report draws the JSON).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/plan/comm_model.h"
#include "weft/plan/estimates.h"
#include "weft/plan/hardware.h"

namespace weft::plan {

struct PlanInput {
  TransformerSpec model;
  std::optional<double> parameters;  // a model given only by its parameter count
  Precision precision = Precision::kMixedAdam;
  Layout layout;
  GpuSpec gpu = gpu_preset("a100-80gb");
  double tokens = 0;           // training tokens (0: no time estimate)
  // The rate: achieved hardware FLOP/s per GPU (--tflops, read as rate_kind says), or an
  // end-to-end MFU (--mfu); neither: predicted from the GPU.
  double achieved_flops = 0;
  RateKind rate_kind = RateKind::kEndToEnd;
  double mfu = 0;
  double gemm_efficiency = 0.8;
  double attention_efficiency = 0.5;  // FlashAttention's share of the peak (no rate given)
  double price_per_kwh = 0.10;
  Cluster cluster;
  std::int64_t global_batch = 0;  // sequences per iteration; 0: no iteration estimate
  double bytes_per_token = 4;  // OpenAI's figure (seed 004)
  // The rate as estimate_iteration takes it.
  Rate rate() const;
};

struct PlanReport {
  PlanInput input;
  double parameters = 0;
  double active_parameters = 0;  // used per token (mixture of experts: fewer than parameters)
  ParameterCount counts;  // when the model is a transformer spec
  MemoryBreakdown memory;
  bool fits = false;
  std::int64_t min_gpus_weights_only = 0;  // 16-bit weights alone
  double flops_per_token = 0;        // hardware FLOPs (recomputation counted)
  double model_flops_per_token = 0;  // model FLOPs (MFU's)
  // Training time, from one rate consistently (docs/planning.md, "One time model").
  std::string time_basis;            // end-to-end | kernel | predicted
  double flops_per_gpu = 0;          // the hardware FLOP/s per GPU the time implies
  double iterations = 0;             // tokens / (global batch x sequence), when a batch is given
  double training_seconds = 0;
  double gpu_hours = 0;
  double mfu = 0, hfu = 0;
  double energy_kwh = 0, energy_cost = 0;
  double dataset_bytes = 0;
  std::optional<IterationEstimate> iteration;
  std::vector<std::string> assumptions;
  std::string to_text() const;
  nlohmann::json to_json() const;
};

// Validates the input (throws ConfigError) and computes the plan.
PlanReport make_plan(const PlanInput& input);

}  // namespace weft::plan
