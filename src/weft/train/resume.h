// Where a run continues from (seed 003 chapter 10: checkpoints): the checkpoint that
// --resume or --auto-resume names, checked against the run, and the position it records, in
// samples of the epoch, so that a run with another global batch or number of ranks continues
// the epoch exactly (task.h); --scale-lr's learning rate for a changed batch.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>

#include "weft/io/checkpoint.h"
#include "weft/train/options.h"
#include "weft/train/task.h"

namespace weft {

// Where the data stands: the epoch, the samples of it trained, and the optimizer steps taken.
struct Position {
  std::int64_t epoch = 0, at = 0, step = 0;
};

// The checkpoint a run continues from (--resume, --auto-resume), checked against the run;
// none when it starts from the beginning (said on `out`).
std::optional<Checkpoint> checkpoint_to_resume(const TrainOptions& o, const Task& task, std::FILE* out);

// The steps from `p` to the run's end: the rest of its epoch and the epochs after it,
// within --max-steps in total.
std::int64_t steps_left(const Task& task, const Position& p, std::int64_t max_steps);

// The position a checkpoint records; the learning rate may follow the batch (--scale-lr
// linear or sqrt; said on `out` unless null).
Position resume_position(const Checkpoint& ck, const TrainOptions& o, const Task& task, double& lr, std::FILE* out);

}  // namespace weft
