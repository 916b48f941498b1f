// Pipeline schedules as programs (design: "the schedule IR"): for each stage, the ordered
// list of what it does in one training step over M micro-batches: receive activations,
// forward, send activations, receive gradients, backward, send gradients, and (seed 002's
// schedule only) an optimizer step after each micro-batch's backward.
//
//   naive        one micro-batch at a time through every stage and back (seed 003 ch. 6's
//                naive model parallelism: one stage busy at a time)
//   gpipe        all forwards, then all backwards; one update per batch (Huang et al. 2019)
//   1f1b         S - s - 1 warm-up forwards, then one forward / one backward, then the
//                remaining backwards (PipeDream-flush, Megatron-LM); same result as gpipe,
//                at most S micro-batches of activations held
//   interleaved  each stage holds `chunks` model chunks (virtual stages s, s + S, ...),
//                Megatron-LM's interleaved 1F1B (Narayanan et al. 2021); needs M % S == 0
//   seed         seed 002 chapter 8: forwards fill the pipeline as in gpipe, and each
//                micro-batch's weights are updated right after its backward (not GPipe's
//                one update per batch; the notes explain the difference)
//
// Messages between two stages match in order, as in the collectives' programs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace weft::algo {

// kUpdatePerMicroBatch ("seed" on the command line) is seed 002 chapter 8's schedule: each
// micro-batch's forward and backward, then an update, before the next micro-batch.
enum class PipeSchedule : std::uint8_t { kNaive, kGpipe, k1F1B, kInterleaved, kUpdatePerMicroBatch };
PipeSchedule parse_pipe_schedule(const std::string& name);  // throws ConfigError
const char* pipe_schedule_name(PipeSchedule s);

enum class PipeOpKind : std::uint8_t { kRecvAct, kForward, kSendAct, kRecvGrad, kBackward, kSendGrad, kStep };

struct PipeOp {
  PipeOpKind kind;
  int micro = 0;   // micro-batch
  int chunk = 0;   // model chunk on this stage (interleaved); virtual stage = chunk * S + stage
  int peer = -1;   // the stage sent to or received from
};

// The program of `stage` (0..stages-1); chunks > 1 only with kInterleaved.
std::vector<PipeOp> pipeline_program(PipeSchedule schedule, int stage, int stages, int micro_batches, int chunks = 1);

// Runs every stage's program on symbolic time: a forward takes `forward` units, a backward
// `backward`, messages are free and buffered, a receive waits for its send. Checks that the
// programs complete (no deadlock), that every forward and backward of every (micro-batch,
// virtual stage) runs once after its input exists, and that the messages of each pair of
// stages match in order. Throws InternalError naming the problem.
struct PipeTiming {
  double makespan = 0;
  double bubble = 0;              // idle share of the stages' time: 1 - busy / (S x makespan)
  std::vector<double> busy;       // per stage
  int peak_in_flight = 0;         // most micro-batch activations held by one stage at once
};
PipeTiming simulate_pipeline(PipeSchedule schedule, int stages, int micro_batches, int chunks = 1, double forward = 1,
                             double backward = 2);

}  // namespace weft::algo
