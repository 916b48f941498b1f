// NCCL's protocols, and the cost model that picks an algorithm and a protocol per call
// (seed 002 ch. 13; NCCL's src/graph/tuning.cc for the form and the constants).
//
// A protocol is how a GPU learns that its peer's data has landed:
//   ll      8-byte lines of 4 bytes of data and a 4-byte flag, stored together: the
//           receiver polls the line, no fence; half of what crosses the wire is flags
//   ll128   128-byte lines of 120 bytes of data and an 8-byte flag
//   simple  the data, then a fence and a flag: the whole wire for data, a synchronization
//           per step
//
// The cost of a collective is latency + bytes / algorithm bandwidth, as in NCCL:
//   ring  latency = launch + (steps between hosts) x net step + (other steps) x NVLink step,
//         2(W-1) steps for an all-reduce, W-1 for an all-gather or reduce-scatter;
//         algorithm bandwidth = bus bandwidth x W / (2(W-1)) (all-reduce), W / (W-1) (others)
//   tree  latency = launch + 2 ((ranks per host - 1) x NVLink step + log2(hosts) x net step);
//         algorithm bandwidth = 0.9 x bus bandwidth / 2 (every rank sends and receives about
//         2n; NCCL's 0.9)
// with the bus bandwidth what one rank's share of its host's NICs carries (channels spread
// over every NIC of the host: ranks per host x one NIC, unless NVLink is slower) or, on one
// host, its NVLink, times the protocol's share of the wire (ll 1/2, ll128 120/128, simple 1).
// NCCL's latency constants are used as they are; its bandwidth corrections measured on
// particular GPUs (ll at 1/4 rather than the wire's 1/2, the tree's correction table by size,
// the ring's plateau factor, ll128's per-channel caps) are not.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/algo/program.h"

namespace weft::algo {

enum class Protocol : std::uint8_t { kLL, kLL128, kSimple };

const char* protocol_name(Protocol p);
// "ll", "ll128" or "simple"; throws ConfigError listing them.
Protocol parse_protocol(const std::string& name);
const std::vector<Protocol>& all_protocols();

// Bytes on the wire that carry `payload` bytes (whole lines for ll and ll128).
std::int64_t wire_bytes(Protocol p, std::int64_t payload);

// How many of `channels` NCCL runs a call of `bytes` on: it gives up channels while each
// would carry less than threads x a per-thread threshold (enqueue.cc's "ring/tree channel
// tuning": simple 512 threads x 64 bytes = 32 KiB a channel, ll 512 x 8 = 4 KiB, ll128
// 640 x 8 = 5 KiB; no protocol: simple's), down to one.
int channels_for_bytes(std::int64_t bytes, int channels, Protocol p);

// NCCL's latencies for a protocol (µs): the launch, and one step over NVLink or the network,
// for an algorithm: "tree", "in_network" (NCCL's CollNet row) or any other (the ring's).
struct ProtocolLatency {
  double launch_us = 0, nvlink_step_us = 0, net_step_us = 0;
};
ProtocolLatency protocol_latency(Protocol p, const std::string& algorithm);

struct CostInputs {
  int ranks = 1;
  int hosts = 1;             // ranks / hosts ranks per host
  double net_gbps = 0;       // one rank's NIC, GB/s
  double nvlink_gbps = 0;    // one rank's NVLink, GB/s (0: none; a single host then uses the NIC)
  bool in_network = false;   // the switches reduce (SHARP, NVLS)
};

struct CollectiveCost {
  std::string algorithm;  // rail_rings (ring), tree (algo registry names) or in_network (the simulator's)
  Protocol protocol = Protocol::kSimple;
  double latency_us = 0, algbw_gbps = 0, time_us = 0;
};

// Every algorithm and protocol the model knows for the collective (all-reduce: ring, tree
// and, with in_network, the switches' reduction; all-gather and reduce-scatter: ring;
// others: none), `bytes` per rank. On one rank, only the ring, at no cost.
//   in_network  each GPU sends its share to its switch and receives the total: across hosts,
//               a reduce-scatter and an all-gather within each host over NVLink around it
//               (latency = launch + 2 (ranks per host - 1) NVLink steps + 2 network steps;
//               per byte the slower of 2 (L - 1) / L over NVLink and 1 / L over the NIC, as
//               the phases of successive pieces overlap); on one host the NVSwitch (launch +
//               2 NVLink steps, NVLink's speed); ll and simple only, as NCCL's CollNet.
std::vector<CollectiveCost> collective_costs(Collective c, std::int64_t bytes, const CostInputs& in);
// The fastest of them; throws ConfigError for a collective the model does not cover.
CollectiveCost cheapest_collective(Collective c, std::int64_t bytes, const CostInputs& in);

}  // namespace weft::algo
