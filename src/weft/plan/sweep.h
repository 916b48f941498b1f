// --sweep: every layout of a job that fits in GPU memory, ranked by the predicted iteration
// time (with overlap, at the kernel rate), equivalent rows collapsed, each explained against
// the fastest and against a reference layout.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/plan/report.h"

namespace weft::plan {

// The values each dimension may take (empty: the default). Defaults: tensor sizes powers of
// two up to the node that divide the heads; pipeline sizes 1..layers (stages need not
// divide the layers: the first and last take the fewer); data parallelism what the GPUs
// leave (dp: only those sizes); context and expert parallelism 1;
// ZeRO 0-3; micro-batches of 1, 2, 4; recomputation, interleaving, sequence parallelism and
// FlashAttention as the input's layout (sequence_parallel, flash_attention: 0 off, 1 on;
// sequence parallelism is tried only with tensor parallelism). Interleaving is tried only
// where Megatron's schedule runs: the layers divide over pp x chunks, the micro-batches
// per pipeline are a multiple of pp.
struct SweepSpace {
  std::vector<int> tp, pp, dp, cp, ep, zero, interleave, sequence_parallel, flash_attention;
  std::vector<std::int64_t> micro_batch;
  std::vector<Recompute> recompute;
};

struct SweepRow {
  Layout layout;
  MemoryBreakdown memory;
  IterationEstimate iteration;
  // Other ZeRO stages of the same layout within 0.5% of its time (collapsed into this row,
  // which keeps the lowest stage: the least communication for the same speed).
  std::vector<int> same_time_zero;
};

// Throws ConfigError for a sweep without GPUs or a global batch, or of a --params model.
std::vector<SweepRow> sweep_layouts(const PlanInput& input, std::int64_t gpus, const SweepSpace& space = {});

// Why `faster` beats `slower`: how much more (+) or less (-) of compute, bubble and each
// dimension's exposed communication `slower` spends, largest first ("bubble +1.824 s, data
// -0.051 s, ...").
std::string explain_difference(const SweepRow& faster, const SweepRow& slower);
std::string layout_label(const Layout& l);
// Where `row` ranks among `rows` (fastest first): 1 + the rows strictly faster.
std::size_t rank_among(const std::vector<SweepRow>& rows, const SweepRow& row);

// The sweep as JSON (weft plan --sweep --json; weft report draws it): "kind": "sweep", the
// model, GPUs and GPU, "top" (the rows shown), and every layout that fits, fastest first,
// with its memory per GPU, headroom, iteration estimate, and why it is slower than the
// fastest; "reference": the layout given on the command line, its rank, and why the
// fastest beats it.
nlohmann::json sweep_to_json(const PlanInput& input, std::int64_t gpus, const std::vector<SweepRow>& rows, int top,
                             const std::optional<SweepRow>& reference = std::nullopt);

// The layout of `input` as a sweep row (for the reference), or nullopt when it does not fit.
std::optional<SweepRow> evaluate_layout(const PlanInput& input);

}  // namespace weft::plan
