// weft plan: one planned job, computed from a model, a cluster and a parallel layout, with
// the assumptions behind every figure. Printed as a table or as JSON (weft report draws the JSON).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/plan/comm_model.h"
#include "weft/plan/estimates.h"

namespace weft::plan {

struct GpuSpec {
  std::string name;
  double memory_bytes = 80e9;
  double peak_flops = 312e12;  // dense 16-bit tensor FLOP/s
  double watts = 400;
};
// a100-40gb, a100-80gb, h100-80gb, v100-16gb, v100-32gb; throws ConfigError listing them.
GpuSpec gpu_preset(const std::string& name);

struct PlanInput {
  TransformerSpec model;
  std::optional<double> parameters;  // a model given only by its parameter count
  Precision precision = Precision::kMixedAdam;
  Layout layout;
  GpuSpec gpu = gpu_preset("a100-80gb");
  double tokens = 0;           // training tokens (0: no time estimate)
  double achieved_flops = 0;   // per GPU; 0: mfu x peak
  double mfu = 0.4;
  double price_per_kwh = 0.10;
  Cluster cluster;
  std::int64_t global_batch = 0;  // sequences per iteration; 0: no iteration estimate
  double bytes_per_token = 4;  // OpenAI's figure (seed 004)
};

struct PlanReport {
  PlanInput input;
  double parameters = 0;
  ParameterCount counts;  // when the model is a transformer spec
  MemoryBreakdown memory;
  bool fits = false;
  std::int64_t min_gpus_weights_only = 0;  // 16-bit weights alone
  double flops_per_token = 0;
  double training_seconds = 0;
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
