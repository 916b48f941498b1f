// The training loop, one for every task and every parallel layout:
//
//   join the job (launcher environment) -> the task's data -> the model -> resume ->
//   the strategies for the layout -> for each step: batch, learning rate, step (forward,
//   backward, update through the strategies), loss, progress; evaluate at each epoch's end,
//   every --eval-every steps and at the end; checkpoint every --checkpoint-every steps, at
//   each epoch's end and at the end -> finish (the whole model on rank 0), reports, the
//   replica check, timeline, saved model.
//
// A parameter-server rank serves instead of training (serve_parameters).
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "weft/train/options.h"

namespace weft {

struct TrainSummary {
  int rank = 0;         // of this process in the job (only rank 0 reports)
  nlohmann::json json;  // the run's figures (docs/training.md lists them)
  std::string to_json() const { return json.dump(); }
};

// Trains; human-readable lines go to `out` on rank 0, progress to stderr.
TrainSummary train(const TrainOptions& options, std::FILE* out);

}  // namespace weft
