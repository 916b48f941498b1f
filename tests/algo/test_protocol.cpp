// NCCL's protocols and the cost model that picks an algorithm and protocol (algo/protocol.h).
#include <gtest/gtest.h>

#include "weft/algo/protocol.h"
#include "weft/util/error.h"

using namespace weft;
using namespace weft::algo;

TEST(Protocols, WireBytesAreWholeLinesOfDataAndFlags) {
  EXPECT_EQ(wire_bytes(Protocol::kSimple, 1000), 1000);
  EXPECT_EQ(wire_bytes(Protocol::kLL, 1000), 2000);  // 4 bytes of data in each 8-byte line
  EXPECT_EQ(wire_bytes(Protocol::kLL, 1), 8);
  EXPECT_EQ(wire_bytes(Protocol::kLL128, 120), 128);  // 120 bytes of data in each 128-byte line
  EXPECT_EQ(wire_bytes(Protocol::kLL128, 121), 256);
  EXPECT_EQ(wire_bytes(Protocol::kLL128, 0), 0);
  for (Protocol p : all_protocols()) EXPECT_EQ(parse_protocol(protocol_name(p)), p);
  EXPECT_THROW(parse_protocol("LL"), ConfigError);
  // NCCL's constants: the ring's launch and step latencies grow from ll to simple.
  EXPECT_DOUBLE_EQ(protocol_latency(Protocol::kSimple, "ring").launch_us, 8.4);
  EXPECT_DOUBLE_EQ(protocol_latency(Protocol::kLL, "ring").net_step_us, 2.7);
  EXPECT_LT(protocol_latency(Protocol::kLL, "ring").nvlink_step_us, protocol_latency(Protocol::kLL128, "ring").nvlink_step_us);
  EXPECT_LT(protocol_latency(Protocol::kLL128, "ring").nvlink_step_us, protocol_latency(Protocol::kSimple, "ring").nvlink_step_us);
}

TEST(CostModel, TreesAndLowLatencyProtocolsForSmallCallsRingsForLarge) {
  // 16 hosts x 8 GPUs, a 400G NIC (50 GB/s) and 3.6 Tb/s of NVLink (450 GB/s) per GPU.
  const CostInputs cluster{128, 16, 50, 450};
  const CollectiveCost small = cheapest_collective(Collective::kAllReduce, 8 << 10, cluster);
  EXPECT_EQ(small.algorithm, "tree");
  EXPECT_EQ(small.protocol, Protocol::kLL);
  const CollectiveCost medium = cheapest_collective(Collective::kAllReduce, 64 << 20, cluster);
  EXPECT_EQ(medium.algorithm, "tree");
  EXPECT_EQ(medium.protocol, Protocol::kLL128);
  // At 1 GB the ring's bandwidth outweighs its 254 steps of latency (with ll128's lines; the
  // wire's 120/128 cost less than simple's 1 ms of step latencies).
  const CollectiveCost large = cheapest_collective(Collective::kAllReduce, std::int64_t{1} << 30, cluster);
  EXPECT_EQ(large.algorithm, "rail_rings");
  EXPECT_EQ(large.protocol, Protocol::kLL128);
  // The ring's figures by hand: 254 steps, 30 between hosts; the bus is 8 NICs' worth
  // (400 GB/s, under NVLink's 450 x 8/7), the algorithm bandwidth 400 x 128 / 254.
  for (const CollectiveCost& c : collective_costs(Collective::kAllReduce, std::int64_t{1} << 30, cluster)) {
    if (c.algorithm != "rail_rings" || c.protocol != Protocol::kSimple) continue;
    EXPECT_NEAR(c.latency_us, 8.4 + 30 * 9.6 + 224 * 3.4, 1e-9);
    EXPECT_NEAR(c.algbw_gbps, 400.0 * 128 / 254, 1e-9);
    EXPECT_NEAR(c.time_us, c.latency_us + (1 << 30) / (1e3 * c.algbw_gbps), 1e-6);
  }
  // On one host every step is an NVLink step: the ring's few steps beat the tree's chain.
  const CollectiveCost one_host = cheapest_collective(Collective::kAllReduce, 8 << 10, CostInputs{8, 1, 50, 450});
  EXPECT_EQ(one_host.algorithm, "rail_rings");
  EXPECT_EQ(one_host.protocol, Protocol::kLL);
  // All-gather has the ring only; broadcast is not modeled.
  EXPECT_EQ(cheapest_collective(Collective::kAllGather, 1 << 20, cluster).algorithm, "ring");
  EXPECT_THROW(cheapest_collective(Collective::kBroadcast, 1 << 20, cluster), ConfigError);
  EXPECT_THROW(cheapest_collective(Collective::kAllReduce, 1 << 20, CostInputs{4, 1, 0, 0}), ConfigError);
  EXPECT_EQ(cheapest_collective(Collective::kAllReduce, 1 << 20, CostInputs{1, 1, 50, 0}).time_us, 0.0);
}
