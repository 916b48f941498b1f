#include "weft/train/share_balancer.h"

#include <cstdlib>

#include "weft/data/deal.h"
#include "weft/util/error.h"

namespace weft {

ShareBalancer::ShareBalancer(int window, int skip, double tolerance)
    : window_(window), skip_(skip), tolerance_(tolerance) {
  WEFT_CHECK(window >= 1 && skip >= 0 && tolerance >= 0, "ShareBalancer: bad settings");
}

bool ShareBalancer::observe(double compute_seconds, std::int64_t rows) {
  if (++steps_ <= skip_) return false;
  seconds_ += compute_seconds;
  rows_ += rows;
  if ((steps_ - skip_) % window_ != 0) return false;
  speed_ = static_cast<double>(rows_) / std::max(seconds_, 1e-9);
  seconds_ = 0;
  rows_ = 0;
  return true;
}

std::optional<std::vector<double>> ShareBalancer::decide(const std::vector<double>& current,
                                                         const std::vector<double>& measured, std::int64_t batch) const {
  const std::vector<std::int64_t> now = proportional_shares(batch, current), next = proportional_shares(batch, measured);
  for (std::size_t r = 0; r < now.size(); ++r)
    if (static_cast<double>(std::llabs(next[r] - now[r])) > tolerance_ * static_cast<double>(batch)) return measured;
  return std::nullopt;
}

std::string shares_text(std::int64_t batch, const std::vector<double>& speeds) {
  std::string text;
  for (std::int64_t s : proportional_shares(batch, speeds)) {
    if (!text.empty()) text += ':';
    text += std::to_string(s);
  }
  return text;
}

}  // namespace weft
