// --sweep: every layout of a job (tensor, pipeline and data sizes, ZeRO stage, micro-batch
// size) that fits in GPU memory, ranked by the estimated iteration time.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "weft/plan/report.h"

namespace weft::plan {

struct SweepRow {
  Layout layout;
  MemoryBreakdown memory;
  IterationEstimate iteration;
};

// Tensor sizes: powers of two up to the node size that divide the heads; pipeline sizes:
// divisors of the layers; data = gpus / (tensor x pipeline); ZeRO 0-3; micro-batches 1, 2,
// 4 (dividing the per-pipeline batch). `input.layout` supplies recomputation and sequence
// parallelism. Returns the layouts that fit, fastest first.
std::vector<SweepRow> sweep_layouts(const PlanInput& input, std::int64_t gpus);

// The sweep as JSON (weft plan --sweep --json; weft report draws it): "kind": "sweep", the
// model, GPUs and GPU, "top" (the rows shown), and every layout that fits, fastest first,
// with its memory per GPU and iteration estimate.
nlohmann::json sweep_to_json(const PlanInput& input, std::int64_t gpus, const std::vector<SweepRow>& rows, int top);

}  // namespace weft::plan
