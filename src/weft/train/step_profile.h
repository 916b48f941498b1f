// weft train --profile: where the steps' time went, by kind of work. The training loop
// reports each step's time, its data time and its exposed communication; the kernels count
// products, convolutions and optimizer updates themselves (tensor/profile.h). The first
// step (one-time set-up: kernels built, memory first touched) is left out. Element-wise
// kernels and the rest of forward and backward (the autograd's bookkeeping, copies) are the
// compute that no counted kind claims.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace weft {

class StepProfile {
 public:
  // Called before and after each step's compute; counting starts with the second step.
  void begin_step();
  void end_step(double step_seconds, double data_seconds, double exposed_comm_seconds);

  // Seconds per kind, in the table's order, and the steps counted.
  struct Share {
    std::string kind;
    double seconds;
  };
  std::vector<Share> shares() const;
  std::int64_t steps() const { return steps_; }

  std::vector<std::string> table() const;  // one line per kind, after a title line
  nlohmann::json to_json() const;

 private:
  std::int64_t seen_ = 0, steps_ = 0;
  double step_ = 0, data_ = 0, comm_ = 0;
};

}  // namespace weft
