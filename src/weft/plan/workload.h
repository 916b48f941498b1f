// One iteration of a planned job as the traces a real run writes (docs/trace-format.md):
// per rank, the tensor-parallel all-reduces of every layer and micro-batch, the pipeline's
// activation and gradient sends, and the data-parallel gradient all-reduce (reduce-scatter
// + all-gather under ZeRO), with compute gaps from the compute model. `weft sim` replays
// the folder on a modeled fabric.
#pragma once

#include <cstdint>
#include <string>

#include "weft/plan/report.h"

namespace weft::plan {

struct EmittedWorkload {
  int ranks = 0;
  std::int64_t records = 0;
  double bytes_per_rank = 0;     // sent by rank 0 (the first stage)
  double iteration_s = 0;        // the trace's own timeline: rank 0's last end
};

// Writes DIR/rank-<r>.jsonl for every rank of `plan`'s layout (ranks: tensor parallel
// innermost, then pipeline, then data parallel). Micro-batches in 1F1B order (stage i of p
// runs min(p - 1 - i, m) forwards first, then alternates a forward and a backward, then the
// remaining backwards: PipeDream-Flush / Megatron's schedule) or, with `gpipe`, every
// forward then every backward. Needs a
// transformer model and a global batch; throws ConfigError otherwise.
enum class EmitOrder { kOneForwardOneBackward, kGPipe };
EmitOrder parse_emit_order(const std::string& s);  // 1f1b | gpipe; throws ConfigError
EmittedWorkload emit_workload(const PlanReport& plan, const std::string& dir,
                              EmitOrder order = EmitOrder::kOneForwardOneBackward);

}  // namespace weft::plan
