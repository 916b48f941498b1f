#include "weft/algo/protocol.h"

#include <algorithm>
#include <cmath>

#include "weft/util/error.h"

namespace weft::algo {

const char* protocol_name(Protocol p) {
  switch (p) {
    case Protocol::kLL: return "ll";
    case Protocol::kLL128: return "ll128";
    case Protocol::kSimple: return "simple";
  }
  return "?";
}

const std::vector<Protocol>& all_protocols() {
  static const std::vector<Protocol> all{Protocol::kLL, Protocol::kLL128, Protocol::kSimple};
  return all;
}

Protocol parse_protocol(const std::string& name) {
  for (Protocol p : all_protocols())
    if (name == protocol_name(p)) return p;
  throw ConfigError("unknown protocol '" + name + "' (known: ll, ll128, simple)");
}

namespace {

// A protocol's lines: data bytes in each, and the line's bytes on the wire.
struct Line {
  std::int64_t data, wire;
};
Line line_of(Protocol p) {
  return p == Protocol::kLL ? Line{4, 8} : p == Protocol::kLL128 ? Line{120, 128} : Line{1, 1};
}

// The share of the wire that carries data.
double wire_share(Protocol p) {
  const Line l = line_of(p);
  return static_cast<double>(l.data) / static_cast<double>(l.wire);
}

}  // namespace

std::int64_t wire_bytes(Protocol p, std::int64_t payload) {
  const Line l = line_of(p);
  return (payload + l.data - 1) / l.data * l.wire;
}

ProtocolLatency protocol_latency(Protocol p, const std::string& algorithm) {
  // NCCL's baseLat and hwLat (NVLink and NET rows), ll / ll128 / simple.
  static const ProtocolLatency ring[] = {{3.6, 0.47, 2.7}, {10.0, 1.9, 4.0}, {8.4, 3.4, 9.6}};
  static const ProtocolLatency trees[] = {{4.4, 0.52, 5.0}, {4.4, 1.2, 8.5}, {0.0, 28.0, 50.0}};
  static const ProtocolLatency collnet[] = {{4.4, 0.5, 5.0}, {4.4, 1.2, 5.0}, {0.0, 4.0, 10.7}};
  const ProtocolLatency* table = algorithm == "tree" ? trees : algorithm == "in_network" ? collnet : ring;
  return table[static_cast<int>(p)];
}

namespace {

CollectiveCost cost(Collective c, const std::string& algorithm, Protocol p, std::int64_t bytes, const CostInputs& in) {
  const bool tree = algorithm == "tree";
  const ProtocolLatency lat = protocol_latency(p, algorithm);
  const int w = in.ranks, hosts = std::max(in.hosts, 1), local = std::max(in.ranks / hosts, 1);
  // The bus bandwidth of one rank: across hosts the channels spread over the host's NICs (one
  // per rank), so a rank's bus carries `local` NICs' worth, unless its NVLink, which carries
  // the other (local - 1) / local of its traffic, is slower; on one host, its NVLink.
  double bus = in.net_gbps;
  if (hosts > 1) {
    bus = local * in.net_gbps;
    if (local > 1 && in.nvlink_gbps > 0) bus = std::min(bus, in.nvlink_gbps * local / (local - 1));
  } else if (in.nvlink_gbps > 0) {
    bus = in.nvlink_gbps;
  }
  bus *= wire_share(p);
  // On one host every step is an NVLink step (or a NIC step without NVLink).
  const double inter = hosts > 1 || in.nvlink_gbps <= 0 ? lat.net_step_us : lat.nvlink_step_us;
  CollectiveCost out{algorithm, p, lat.launch_us, 0, 0};
  if (algorithm == "in_network") {
    const double share = wire_share(p), nvlink = in.nvlink_gbps > 0 ? in.nvlink_gbps : in.net_gbps;
    if (hosts == 1) {
      out.latency_us += 2 * lat.nvlink_step_us;
      out.algbw_gbps = nvlink * share;
    } else {
      out.latency_us += 2 * (local - 1) * lat.nvlink_step_us + 2 * lat.net_step_us;
      // The phases of successive pieces overlap: the slower of NVLink and the NIC.
      out.algbw_gbps = share / std::max(2.0 * (local - 1) / (local * nvlink), 1.0 / (local * in.net_gbps));
    }
  } else if (tree) {
    out.latency_us += 2 * ((local - 1) * lat.nvlink_step_us + std::ceil(std::log2(hosts)) * inter);
    out.algbw_gbps = bus * 0.9 / 2;  // NCCL's 0.9 for the tree
  } else {
    const bool all_reduce = c == Collective::kAllReduce;
    const int steps = (all_reduce ? 2 : 1) * (w - 1);
    const int net_steps = hosts > 1 ? (all_reduce ? 2 : 1) * (hosts - 1) : 0;
    out.latency_us += net_steps * inter + (steps - net_steps) * (hosts > 1 ? lat.nvlink_step_us : inter);
    out.algbw_gbps = bus * w / ((all_reduce ? 2.0 : 1.0) * (w - 1));
  }
  out.time_us = out.latency_us + static_cast<double>(bytes) / (1e3 * out.algbw_gbps);
  return out;
}

}  // namespace

std::vector<CollectiveCost> collective_costs(Collective c, std::int64_t bytes, const CostInputs& in) {
  std::vector<CollectiveCost> out;
  std::vector<std::string> algorithms;
  if (c == Collective::kAllReduce) algorithms = {"rail_rings", "tree"};
  if (c == Collective::kAllReduce && in.in_network) algorithms.push_back("in_network");
  if (c == Collective::kAllGather || c == Collective::kReduceScatter) algorithms = {"ring"};
  if (in.ranks < 2) {  // nothing moves: the ring, free
    if (!algorithms.empty()) out.push_back({algorithms[0], Protocol::kSimple, 0, 0, 0});
    return out;
  }
  if (in.net_gbps <= 0) return out;
  for (const std::string& a : algorithms)
    for (Protocol p : all_protocols())
      if (a != "in_network" || p != Protocol::kLL128) out.push_back(cost(c, a, p, bytes, in));
  return out;
}

int channels_for_bytes(std::int64_t bytes, int channels, Protocol p) {
  const std::int64_t per_channel = p == Protocol::kSimple ? 512 * 64 : p == Protocol::kLL ? 512 * 8 : 640 * 8;
  int nc = std::max(channels, 1);
  while (nc >= 2 && bytes < nc * per_channel) --nc;
  return nc;
}

CollectiveCost cheapest_collective(Collective c, std::int64_t bytes, const CostInputs& in) {
  const std::vector<CollectiveCost> all = collective_costs(c, bytes, in);
  if (all.empty())
    throw ConfigError(std::string("algorithm 'auto' (the cost model) covers allreduce, allgather and reduce_scatter over "
                                  "GPUs with a network link, not ") + collective_name(c) + ": name an algorithm");
  return *std::min_element(all.begin(), all.end(),
                           [](const CollectiveCost& a, const CollectiveCost& b) { return a.time_us < b.time_us; });
}

}  // namespace weft::algo
