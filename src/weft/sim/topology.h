// The modeled fabric as a graph: GPU endpoints (each with its RDMA NIC, or behind a NIC
// shared by several GPUs), switches (rail/leaf, spine, super-spine, NVSwitch), and
// full-duplex links with a speed and a propagation delay.
//
// Topologies come from YAML (examples/topologies/): a generated fabric (single-switch,
// rail-only, rail-optimized 2- or 3-tier, fat-tree) or an explicit list of switches,
// hosts and links. Every inconsistency is a ConfigError naming the node or key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/sim/engine.h"

namespace weft::sim {

enum class NodeKind : std::uint8_t { kGpu, kSwitch, kNic };

struct Node {
  std::string name;
  NodeKind kind = NodeKind::kSwitch;
  std::string role;          // gpu, nic, rail, leaf, spine, super-spine, nvswitch, edge, agg, core, switch
  int port_limit = 0;        // switches: physical ports (0: as many as cabled)
  Time latency = 0;          // switching latency (switches and shared NICs)
  bool transit = false;      // GPUs: may forward others' packets (rail-only: the NVLink hop)
  int host = -1;             // GPUs and NICs: the host index
  int local = -1;            // GPUs: index within the host
  std::uint32_t ip = 0;      // GPUs: IPv4 address (ECMP hash input)
};

struct Link {
  int a = -1, b = -1;
  double bps = 0;            // each direction
  Time delay = 0;            // propagation
  std::string tier;          // nvlink, pcie, access, spine, super-spine
};

struct Topology {
  std::string name;
  std::string fabric;        // the generator used, or "custom"
  std::vector<Node> nodes;
  std::vector<Link> links;
  std::vector<int> gpus;     // node index of GPU rank r
  int gpus_per_host = 1;

  int find(const std::string& node_name) const;  // -1 when absent
  int add_node(Node n);
  void add_link(int a, int b, double bps, Time delay, const std::string& tier);
  // Checks port limits and connectivity; throws ConfigError.
  void validate() const;
};

Topology parse_topology(const std::string& yaml_text, const std::string& source_name);
Topology load_topology(const std::string& path);

// Generators, also usable from code and tests.
struct FatTreeSpec {
  int k = 4;
  double bps = 100e9;
  Time delay = 500 * kNs;
  Time switch_latency = 500 * kNs;
};
Topology make_fat_tree(const FatTreeSpec& spec);

}  // namespace weft::sim
