// One iteration of a planned job as the traces a real run writes (docs/trace-format.md):
// per rank, the tensor-parallel all-reduces of every layer and micro-batch, ring attention's
// key-value passes (context parallelism), the experts' all-to-alls (expert parallelism), the
// pipeline's activation and gradient sends in 1F1B, interleaved or GPipe order, and on a
// second stream the data-parallel reductions layer by layer as their gradients are done
// (reduce-scatter + all-gather under ZeRO; ZeRO 3's gathers before every layer), with
// compute gaps from the compute model. `weft sim` replays the folder on a modeled fabric.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/plan/report.h"

namespace weft::plan {

struct EmittedWorkload {
  int ranks = 0;
  std::int64_t records = 0;
  double bytes_per_rank = 0;     // sent by rank 0 (the first stage)
  double iteration_s = 0;        // the trace's own timeline: rank 0's last end
};

// Writes DIR/rank-<r>.jsonl for every rank of `plan`'s layout (ranks: tensor parallel
// innermost, then context, pipeline and data parallel; expert parallelism over groups of ep
// consecutive data-parallel ranks). Micro-batches in 1F1B order (stage i of p runs
// min(p - 1 - i, m) forwards first, then alternates a forward and a backward, then the
// remaining backwards: PipeDream-Flush / Megatron's schedule), Megatron's interleaved order
// with --interleave, or, with `gpipe`, every forward then every backward. Data-parallel
// records carry "stream": 1: they run beside the compute from the time the compute model
// says their gradients are done. Needs a transformer model and a global batch; throws
// ConfigError otherwise.
enum class EmitOrder { kOneForwardOneBackward, kGPipe };
// One pass of a micro-batch through one model chunk of a stage.
struct StagePass {
  int chunk = 0;
  bool forward = true;
};
// The passes stage `stage` of `stages` runs, in order, for `micro` micro-batches of
// `chunks` model chunks each (chunks > 1: Megatron's interleaved 1F1B).
std::vector<StagePass> stage_passes(EmitOrder order, int stages, int stage, std::int64_t micro, int chunks);
EmitOrder parse_emit_order(const std::string& s);  // 1f1b | gpipe; throws ConfigError
EmittedWorkload emit_workload(const PlanReport& plan, const std::string& dir,
                              EmitOrder order = EmitOrder::kOneForwardOneBackward);
// The folder checked as an output (util/file.h: check_output_folder), and a folder holding
// the traces of ranks past `world` (an earlier emission or run of more ranks), which would
// be replayed as a mix of the two workloads, refused: throws ConfigError naming them,
// before anything is written (emit_workload checks it first too), so nothing of the earlier
// traces is lost either. Traces of ranks below `world` are replaced.
void check_emit_folder(const std::string& dir, int world);

}  // namespace weft::plan
