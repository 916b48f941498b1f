#include "weft/tensor/thread_governor.h"

#include <fmt/format.h>

#include <algorithm>

#include "weft/util/error.h"

namespace weft {

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
}  // namespace

ThreadGovernor::ThreadGovernor(int max_threads, Options options)
    : o_(options), current_(max_threads), chosen_(max_threads), left_(std::max(options.warmup, 1)), hold_(options.hold) {
  if (max_threads < 1 || o_.window < 1 || o_.hold < 1 || o_.max_hold < o_.hold || o_.warmup < 0 || o_.slow <= 1)
    throw ConfigError("thread governor: bad settings");
  for (int t = 1; t < max_threads; t *= 2) candidates_.push_back(t);
  candidates_.push_back(max_threads);
}

void ThreadGovernor::start_measuring() {
  phase_ = Phase::kMeasuring;
  medians_.assign(candidates_.size(), 0);
  candidate_ = 0;
  samples_.clear();
  slow_steps_ = 0;
  settling_ = current_ != candidates_[0];
  current_ = candidates_[0];
}

int ThreadGovernor::observe(double seconds, bool cores_busy) {
  if (candidates_.size() == 1) return current_;
  free_steps_ = cores_busy ? 0 : free_steps_ + 1;
  const int most = candidates_.back();
  switch (phase_) {
    case Phase::kWarmup:
      if (--left_ <= 0) {
        phase_ = Phase::kHolding;  // at all threads, until other work shows up
        left_ = 0;
      }
      break;
    case Phase::kHolding:
      // Steps much slower than the choice measured: what it was measured against changed.
      slow_steps_ = reference_ > 0 && seconds > o_.slow * reference_ ? slow_steps_ + 1 : 0;
      if (slow_steps_ >= 2) {
        start_measuring();
      } else if (chosen_ == most) {
        if (cores_busy && --left_ <= 0) start_measuring();  // all threads: only while others work
      } else if (free_steps_ >= o_.window) {  // the other work left: all threads again
        change_ = Change{chosen_, most, fmt::format("no other work on the cores for {} steps", free_steps_)};
        chosen_ = current_ = most;
        hold_ = o_.hold;
        left_ = 0;
        reference_ = 0;
      } else if (--left_ <= 0) {
        start_measuring();  // fewer threads: time to check again
      }
      break;
    case Phase::kMeasuring: {
      // A count already far slower than a smaller one measured is not measured further
      // (its settling step included: such steps are costly).
      const bool hopeless = candidate_ > 0 && seconds > o_.slow * *std::min_element(medians_.begin(), medians_.begin() + candidate_);
      if (settling_ && !hopeless) {
        settling_ = false;
        break;
      }
      settling_ = false;
      samples_.push_back(seconds);
      if (static_cast<int>(samples_.size()) < o_.window && !hopeless) break;
      medians_[candidate_] = median(samples_);
      samples_.clear();
      if (++candidate_ < candidates_.size()) {
        current_ = candidates_[candidate_];
        settling_ = true;
      } else {
        decide();
      }
      break;
    }
  }
  return current_;
}

// The most threads unless fewer are at least `margin` faster.
void ThreadGovernor::decide() {
  std::size_t best = candidates_.size() - 1;
  for (std::size_t i = best; i-- > 0;)
    if (medians_[i] < medians_[best] * (1 - o_.margin)) best = i;
  const int before = chosen_;
  chosen_ = candidates_[best];
  reference_ = medians_[best];
  // Kept longer when unchanged, and at once for long when more threads were far slower
  // (measuring them again costs steps that are `slow` times slower).
  const bool far_slower = best + 1 < candidates_.size() && medians_.back() > o_.slow * medians_[best];
  hold_ = far_slower ? o_.max_hold : chosen_ == before ? std::min(hold_ * 2, o_.max_hold) : o_.hold;
  phase_ = Phase::kHolding;
  left_ = hold_;
  current_ = chosen_;
  if (chosen_ != before) {
    std::string steps;
    for (std::size_t i = candidates_.size(); i-- > 0;)
      steps += fmt::format("{}{:.1f} ms with {}", i + 1 < candidates_.size() ? ", " : "", medians_[i] * 1e3, candidates_[i]);
    change_ = Change{before, chosen_,
                     fmt::format("median step {}{}", steps, chosen_ < before ? ": the cores are busy with other work" : "")};
  }
}

std::optional<ThreadGovernor::Change> ThreadGovernor::take_change() {
  auto c = change_;
  change_.reset();
  return c;
}

}  // namespace weft
