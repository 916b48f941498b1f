// Data-parallel batch shares that follow the replicas' measured speeds (seed 003 chapter 12:
// heterogeneous workers; --dp-shares measured).
//
// Each replica times its own computation of every step (forward, backward and its part of the
// update: not the time it waits for the others in the collectives) and counts the rows it
// computed. After each window of steps (the first steps left out as warm-up) the replicas
// exchange their rows per second; when the shares those speeds give a global batch differ
// from the current ones by more than a tolerance, the following batches are dealt by them
// (data/deal.h), so that a fast replica computes more rows and no replica waits long for
// another. The mathematics of the step does not change (the weights of deal.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace weft {

class ShareBalancer {
 public:
  // Windows of `window` steps after `skip` warm-up steps; `tolerance`: a fraction of the batch.
  ShareBalancer(int window = 10, int skip = 2, double tolerance = 0.05);
  // One step: the seconds this replica computed and the rows it computed. True when a window
  // just ended: then exchange speed() among the replicas and decide().
  bool observe(double compute_seconds, std::int64_t rows);
  // This replica's rows per second over the window just ended.
  double speed() const { return speed_; }
  // The speeds to deal by from now, or none when the shares they give a global batch of
  // `batch` rows are within the tolerance of those `current` gives.
  std::optional<std::vector<double>> decide(const std::vector<double>& current, const std::vector<double>& measured,
                                            std::int64_t batch) const;

 private:
  int window_, skip_;
  double tolerance_;
  int steps_ = 0;
  double seconds_ = 0, speed_ = 0;
  std::int64_t rows_ = 0;
};

// "43:21": the rows of a global batch of `batch` each replica computes at these speeds.
std::string shares_text(std::int64_t batch, const std::vector<double>& speeds);

}  // namespace weft
