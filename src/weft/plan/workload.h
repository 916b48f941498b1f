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
// innermost, then pipeline, then data parallel; GPipe order of micro-batches). Needs a
// transformer model and a global batch; throws ConfigError otherwise.
EmittedWorkload emit_workload(const PlanReport& plan, const std::string& dir);

}  // namespace weft::plan
