// Where a training step's time goes, by kind of work: matrix products, convolutions (and
// pooling), the optimizer, and (measured by the training loop) data and exposed
// communication; element-wise kernels and the rest of forward and backward are what is
// left of the compute. Counting is off unless a caller turns it on (weft train --profile).
//
// A ProfileScope counts its wall time against its kind when profiling is on and no other
// scope is open on its thread and the thread is not running chunks of a parallel_for: the
// outermost scope owns the work nested in it (a convolution's products count as
// convolution), and the wall time of parallel work is counted once.
#pragma once

#include <array>
#include <cstdint>

namespace weft {

enum class Work : int { Gemm, Conv, Optimizer };
constexpr int kWorkKinds = 3;
const char* work_name(Work w);

void set_profiling(bool on);
bool profiling();

class ProfileScope {
 public:
  explicit ProfileScope(Work w);
  ~ProfileScope();
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  Work work_;
  std::int64_t start_ns_ = -1;  // -1: not counting
};

// Seconds counted per kind since the last reset.
std::array<double, kWorkKinds> profile_seconds();
void profile_reset();

}  // namespace weft
