#include "weft/train/step_profile.h"

#include <fmt/format.h>

#include <algorithm>

#include "weft/tensor/profile.h"

namespace weft {

void StepProfile::begin_step() {
  if (seen_ == 1) profile_reset();  // the first step's kernels are not counted
  set_profiling(true);
}

void StepProfile::end_step(double step_seconds, double data_seconds, double exposed_comm_seconds) {
  set_profiling(false);
  if (seen_++ == 0) return;
  ++steps_;
  step_ += step_seconds;
  data_ += data_seconds;
  comm_ += exposed_comm_seconds;
}

std::vector<StepProfile::Share> StepProfile::shares() const {
  const auto counted = steps_ > 0 ? profile_seconds() : std::array<double, kWorkKinds>{};
  auto kind = [&](Work w) { return Share{work_name(w), counted[static_cast<std::size_t>(w)]}; };
  const Share gemm = kind(Work::Gemm), conv = kind(Work::Conv), optimizer = kind(Work::Optimizer);
  const double rest = std::max(0.0, step_ - data_ - comm_ - gemm.seconds - conv.seconds - optimizer.seconds);
  return {gemm, conv, {"element-wise and other", rest}, optimizer, {"data", data_}, {"communication", comm_}};
}

std::vector<std::string> StepProfile::table() const {
  std::vector<std::string> lines;
  if (steps_ == 0) return {"profile: no step after the first to count"};
  lines.push_back(fmt::format("profile ({} steps after the first, {:.2f} ms a step):", steps_, 1e3 * step_ / steps_));
  for (const Share& s : shares())
    lines.push_back(fmt::format("  {:<24}{:>6.1f}%  {:>9.3f} ms/step", s.kind, step_ > 0 ? 100.0 * s.seconds / step_ : 0.0,
                                1e3 * s.seconds / steps_));
  return lines;
}

nlohmann::json StepProfile::to_json() const {
  nlohmann::json j = {{"steps", steps_}, {"step_seconds", step_}};
  nlohmann::json kinds = nlohmann::json::object();
  for (const Share& s : shares()) kinds[s.kind] = s.seconds;
  j["seconds"] = kinds;
  return j;
}

}  // namespace weft
