// In-network all-reduce: switches that reduce (SHARP on network switches, NVLS on an
// NVSwitch; Topology::add_reducers) take the place of the GPUs' exchanges.
//
// Each GPU sends its data to the reducer of its first switch and receives the total back,
// in segments of 256 KiB one behind another. GPUs whose first switches differ are joined by
// a two-level aggregation tree: their switches' reducers reduce what their GPUs sent and pass
// it to the reducer of one root switch (the switch nearest all of them), which returns the
// total down the tree. With several GPUs per host, each on its own rail, the GPUs first
// reduce-scatter within the host over NVLink (a ring), each reduces its share across hosts
// in the network with the GPUs of its local index, and they all-gather within the host;
// GPUs all on one host with an NVSwitch reduce in the NVSwitch (NVLS).
//
// The result is programs in the schedule IR over the GPUs (ranks 0 .. W-1) followed by the
// reducers used; every reducer runs in channels of its own per tree (up and down), every GPU
// sends in channel 0 and receives in channel 1, so the simulator runs them apart.
#pragma once

#include <cstdint>
#include <vector>

#include "weft/algo/program.h"
#include "weft/sim/topology.h"

namespace weft::sim {

struct InNetworkAllReduce {
  std::vector<int> gpus;                // topology GPU ranks: the members, then the reducers
  std::vector<algo::Program> programs;  // one per entry of gpus
};

// Throws ConfigError when the topology has no in-network reduction.
InNetworkAllReduce in_network_allreduce(const Topology& t, const std::vector<int>& members, std::int64_t n);

}  // namespace weft::sim
