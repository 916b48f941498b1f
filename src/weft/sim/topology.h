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
#include <unordered_map>
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
  // Node index of GPU rank r: the GPUs, then (with in-network reduction) one reducer per
  // switch, an endpoint that the workloads' GPU numbers never name.
  std::vector<int> gpus;
  int gpus_per_host = 1;
  // In-network reduction (SHARP on network switches, NVLS on NVSwitches): the GPU rank of each
  // switch node's reducer, -1 where none (empty without in-network reduction).
  std::vector<int> reducer_of;

  // Nodes are added by add_node, which indexes their names: find is a hash look-up.
  int find(const std::string& node_name) const;  // -1 when absent
  int add_node(Node n);
  // The first link joining the nodes named a and b; ConfigError starting with `what` when a
  // name is unknown or no link joins them.
  int link_between(const std::string& a, const std::string& b, const std::string& what) const;
  void add_link(int a, int b, double bps, Time delay, const std::string& tier);
  // Checks port limits and connectivity; throws ConfigError.
  void validate() const;
  // Gives every switch a reducer: the switch's reduction engine as an endpoint (role
  // "reducer", named SWITCH.reducer) on a link of the switch's total port speed and no delay,
  // which receives at each port's rate and sends each flow at a port's rate, as the switch
  // reduces and multicasts. Not counted among the GPUs or the switch's ports.
  void add_reducers();
  bool in_network_reduction() const { return !reducer_of.empty(); }
  // The GPUs among `gpus` (ranks 0 .. gpu_count() - 1), what workloads may name.
  int gpu_count() const { return in_network_reduction() ? first_reducer_ : static_cast<int>(gpus.size()); }
  // The links of each node (indices into links), and a link's other end.
  std::vector<std::vector<int>> links_by_node() const;
  int other_end(int link, int node) const {
    const Link& l = links[static_cast<std::size_t>(link)];
    return l.a == node ? l.b : l.a;
  }

 private:
  int first_reducer_ = 0;
  std::unordered_map<std::string, int> index_;  // node name -> index
};

// How a GPU is attached: over NVLink (its fastest NVLink, the NVSwitch it reaches), and to
// the network (its port's speed, a shared NIC's share of its fastest link out at most, and
// the switch that port reaches first, directly or behind the NIC). -1 / 0 where none.
struct GpuAttachment {
  double nvlink_bps = 0, network_bps = 0;
  int nvswitch = -1, network_switch = -1;
};
// For GPU ranks 0 .. gpu_count() - 1.
std::vector<GpuAttachment> gpu_attachments(const Topology& t);

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
