// Max-min fair rates of flows sharing capacitated resources (links), by progressive
// filling: all flows grow together; when a resource fills, the flows through it stop at
// its fair share and the others go on. The result gives every flow the largest rate such
// that no resource exceeds its capacity and no flow could gain without taking from a flow
// whose rate is no larger (Bertsekas and Gallager, Data Networks, section 6.5.2).
//
// Contract: flow f uses resources paths.resource[paths.begin[f] .. paths.begin[f + 1]);
// capacity[r] >= 0 (units per second, any unit). Returns each flow's rate; a flow through
// no resource gets +infinity. Pure; O((F x path length) log R).
#pragma once

#include <cstdint>
#include <vector>

namespace weft::sim {

struct FlowPaths {
  std::vector<std::uint32_t> begin{0};  // F + 1 offsets
  std::vector<std::int32_t> resource;
  void add(const std::int32_t* first, std::size_t n);
  std::size_t flows() const { return begin.size() - 1; }
};

std::vector<double> max_min_rates(const FlowPaths& paths, const std::vector<double>& capacity);

}  // namespace weft::sim
