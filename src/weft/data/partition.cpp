#include "weft/data/partition.h"

#include <cmath>
#include <numeric>

#include "weft/util/error.h"

namespace weft {

double gamma_sample(Rng& rng, double shape) {
  if (shape < 1.0) {
    double u = 0;
    while (u <= 0) u = rng.uniform();
    return gamma_sample(rng, shape + 1.0) * std::pow(u, 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x = rng.normal(), v = 1.0 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    double u = rng.uniform();
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
    if (u > 0 && std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
  }
}

std::vector<std::vector<std::int64_t>> dirichlet_partition(const std::vector<std::int32_t>& labels, int classes,
                                                           int clients, double alpha, std::uint64_t seed) {
  if (clients < 1) throw ConfigError("federated averaging needs at least one client");
  if (!(alpha > 0)) throw ConfigError("the Dirichlet concentration must be positive (or infinite)");
  std::vector<std::vector<std::int64_t>> out(static_cast<size_t>(clients));
  const std::int64_t n = static_cast<std::int64_t>(labels.size());
  Rng rng(seed * 0x2545f4914f6cdd1dULL + 17);
  if (std::isinf(alpha)) {
    std::vector<std::int64_t> perm(static_cast<size_t>(n));
    std::iota(perm.begin(), perm.end(), 0);
    rng.shuffle(perm);
    for (std::int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i % clients)].push_back(perm[static_cast<size_t>(i)]);
    return out;
  }
  std::vector<std::vector<std::int64_t>> by_class(static_cast<size_t>(classes));
  for (std::int64_t i = 0; i < n; ++i) {
    int c = labels[static_cast<size_t>(i)];
    if (c < 0 || c >= classes) throw ConfigError("label " + std::to_string(c) + " outside 0.." + std::to_string(classes - 1));
    by_class[static_cast<size_t>(c)].push_back(i);
  }
  for (auto& members : by_class) {
    rng.shuffle(members);
    std::vector<double> share(static_cast<size_t>(clients));
    double total = 0;
    for (auto& s : share) total += (s = gamma_sample(rng, alpha));
    // Deal by cumulative shares, so the counts add up exactly.
    double acc = 0;
    std::size_t begin = 0;
    for (int k = 0; k < clients; ++k) {
      acc += share[static_cast<size_t>(k)] / total;
      std::size_t end = k + 1 == clients ? members.size()
                                         : std::min(members.size(), static_cast<std::size_t>(std::llround(acc * members.size())));
      for (std::size_t i = begin; i < end; ++i) out[static_cast<size_t>(k)].push_back(members[i]);
      begin = std::max(begin, end);
    }
  }
  return out;
}

}  // namespace weft
