#include "weft/sim/max_min.h"

#include <algorithm>
#include <limits>
#include <queue>

namespace weft::sim {

void FlowPaths::add(const std::int32_t* first, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) resource.push_back(first[i]);
  begin.push_back(static_cast<std::uint32_t>(resource.size()));
}

std::vector<double> max_min_rates(const FlowPaths& paths, const std::vector<double>& capacity) {
  const std::size_t F = paths.flows(), R = capacity.size();
  std::vector<double> rate(F, std::numeric_limits<double>::infinity());
  // The flows through each resource (compressed rows).
  std::vector<std::uint32_t> count(R, 0), users_begin(R + 1, 0);
  for (std::int32_t r : paths.resource) ++count[static_cast<std::size_t>(r)];
  for (std::size_t r = 0; r < R; ++r) users_begin[r + 1] = users_begin[r] + count[r];
  std::vector<std::uint32_t> users(paths.resource.size()), fill(users_begin.begin(), users_begin.end() - 1);
  for (std::size_t f = 0; f < F; ++f)
    for (std::uint32_t i = paths.begin[f]; i < paths.begin[f + 1]; ++i)
      users[fill[static_cast<std::size_t>(paths.resource[i])]++] = static_cast<std::uint32_t>(f);
  std::vector<double> left(capacity);
  std::vector<char> frozen(F, 0);
  using Entry = std::pair<double, std::int32_t>;  // (fair share, resource)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  auto share = [&](std::size_t r) { return std::max(left[r], 0.0) / count[r]; };
  for (std::size_t r = 0; r < R; ++r)
    if (count[r] > 0) heap.emplace(share(r), static_cast<std::int32_t>(r));
  while (!heap.empty()) {
    const auto [s, r] = heap.top();
    heap.pop();
    const auto ru = static_cast<std::size_t>(r);
    if (count[ru] == 0 || s != share(ru)) continue;  // an older entry of a resource that changed
    // The resource with the smallest fair share fills: its flows stop there.
    for (std::uint32_t i = users_begin[ru]; i < users_begin[ru + 1]; ++i) {
      const std::uint32_t f = users[i];
      if (frozen[f]) continue;
      frozen[f] = 1;
      rate[f] = s;
      for (std::uint32_t k = paths.begin[f]; k < paths.begin[f + 1]; ++k) {
        const auto r2 = static_cast<std::size_t>(paths.resource[k]);
        left[r2] -= s;
        if (--count[r2] > 0 && r2 != ru) heap.emplace(share(r2), static_cast<std::int32_t>(r2));
      }
    }
  }
  return rate;
}

}  // namespace weft::sim
