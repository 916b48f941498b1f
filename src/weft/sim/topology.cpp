#include "weft/sim/topology.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <set>
#include <unordered_map>

#include "weft/sim/config.h"
#include "weft/util/error.h"
#include "weft/util/file.h"

namespace weft::sim {

int Topology::find(const std::string& node_name) const {
  const auto found = index_.find(node_name);
  return found == index_.end() ? -1 : found->second;
}

int Topology::add_node(Node n) {
  const int id = static_cast<int>(nodes.size());
  index_.emplace(n.name, id);  // the first of a repeated name, as a scan would find
  nodes.push_back(std::move(n));
  return id;
}

int Topology::link_between(const std::string& a, const std::string& b, const std::string& what) const {
  const int ia = find(a), ib = find(b);
  if (ia < 0 || ib < 0) throw ConfigError(what + ": unknown node '" + (ia < 0 ? a : b) + "'");
  for (std::size_t l = 0; l < links.size(); ++l)
    if ((links[l].a == ia && links[l].b == ib) || (links[l].a == ib && links[l].b == ia)) return static_cast<int>(l);
  throw ConfigError(what + ": there is no link between " + a + " and " + b);
}

void Topology::add_link(int a, int b, double bps, Time delay, const std::string& tier) {
  if (a == b) throw ConfigError("topology " + name + ": link from " + nodes[a].name + " to itself");
  links.push_back(Link{a, b, bps, delay, tier});
}

void Topology::validate() const {
  if (gpus.empty()) throw ConfigError("topology " + name + ": no GPUs");
  std::vector<int> degree(nodes.size(), 0);
  for (const Link& l : links) {
    if (l.tier == "reducer") continue;  // inside the switch
    ++degree[l.a];
    ++degree[l.b];
  }
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.port_limit > 0 && degree[i] > n.port_limit)
      throw ConfigError(n.role + " switch " + n.name + " needs " + std::to_string(degree[i]) + " ports, has " +
                        std::to_string(n.port_limit));
    if (degree[i] == 0 && (n.kind == NodeKind::kGpu || gpus.size() > 1))
      throw ConfigError("topology " + name + ": " + n.name + " is not connected to anything");
  }
  // Every GPU reaches every other.
  std::vector<std::vector<int>> adj(nodes.size());
  for (const Link& l : links) {
    adj[l.a].push_back(l.b);
    adj[l.b].push_back(l.a);
  }
  std::vector<char> seen(nodes.size(), 0);
  std::vector<int> stack{gpus[0]};
  seen[gpus[0]] = 1;
  while (!stack.empty()) {
    int u = stack.back();
    stack.pop_back();
    for (int v : adj[u])
      if (!seen[v]) {
        seen[v] = 1;
        stack.push_back(v);
      }
  }
  for (int g : gpus)
    if (!seen[g]) throw ConfigError("topology " + name + ": " + nodes[g].name + " cannot reach " + nodes[gpus[0]].name);
}

void Topology::add_reducers() {
  if (in_network_reduction()) return;
  first_reducer_ = static_cast<int>(gpus.size());
  reducer_of.assign(nodes.size(), -1);
  const std::size_t switches = nodes.size();
  std::vector<double> total_bps(switches, 0);
  for (const Link& l : links) {
    total_bps[static_cast<std::size_t>(l.a)] += l.bps;
    total_bps[static_cast<std::size_t>(l.b)] += l.bps;
  }
  for (std::size_t s = 0; s < switches; ++s) {
    if (nodes[s].kind != NodeKind::kSwitch) continue;
    const double total = total_bps[s];
    if (total <= 0) continue;
    Node n;
    n.name = nodes[s].name + ".reducer";
    n.kind = NodeKind::kGpu;
    n.role = "reducer";
    const int index = static_cast<int>(gpus.size()) - first_reducer_;
    n.ip = (10u << 24) | (254u << 16) | static_cast<std::uint32_t>(index & 0xFFFF);
    const int id = add_node(n);
    add_link(id, static_cast<int>(s), total, 0, "reducer");
    reducer_of[s] = static_cast<int>(gpus.size());
    gpus.push_back(id);
  }
  reducer_of.resize(nodes.size(), -1);
}

std::vector<std::vector<int>> Topology::links_by_node() const {
  std::vector<std::vector<int>> out(nodes.size());
  for (std::size_t i = 0; i < links.size(); ++i) {
    out[static_cast<std::size_t>(links[i].a)].push_back(static_cast<int>(i));
    out[static_cast<std::size_t>(links[i].b)].push_back(static_cast<int>(i));
  }
  return out;
}

std::vector<GpuAttachment> gpu_attachments(const Topology& t) {
  const std::vector<std::vector<int>> links_of = t.links_by_node();
  auto kind = [&](int node) { return t.nodes[static_cast<std::size_t>(node)].kind; };
  std::vector<GpuAttachment> out(static_cast<std::size_t>(t.gpu_count()));
  for (int g = 0; g < t.gpu_count(); ++g) {
    const int node = t.gpus[static_cast<std::size_t>(g)];
    GpuAttachment& a = out[static_cast<std::size_t>(g)];
    for (int l : links_of[static_cast<std::size_t>(node)]) {
      const Link& link = t.links[static_cast<std::size_t>(l)];
      const int other = t.other_end(l, node);
      if (link.tier == "nvlink") {
        a.nvlink_bps = std::max(a.nvlink_bps, link.bps);
        if (a.nvswitch < 0 && kind(other) == NodeKind::kSwitch) a.nvswitch = other;
      } else if (kind(other) == NodeKind::kNic) {
        // A NIC shared by GPUs: its share of the NIC's fastest link out, or the PCIe link.
        int sharing = 0;
        double out_bps = 0;
        for (int m : links_of[static_cast<std::size_t>(other)]) {
          const int far = t.other_end(m, other);
          if (kind(far) == NodeKind::kGpu) {
            ++sharing;
          } else {
            out_bps = std::max(out_bps, t.links[static_cast<std::size_t>(m)].bps);
            if (a.network_switch < 0 && kind(far) == NodeKind::kSwitch) a.network_switch = far;
          }
        }
        a.network_bps = std::max(a.network_bps, std::min(link.bps, out_bps / std::max(sharing, 1)));
      } else {
        a.network_bps = std::max(a.network_bps, link.bps);
        if (a.network_switch < 0 && kind(other) == NodeKind::kSwitch) a.network_switch = other;
      }
    }
  }
  return out;
}

namespace {

// --- YAML helpers: every key checked, every value with a one-line error ---

constexpr std::int64_t kMaxGpus = 262144;

// Every fabric is refused past kMaxGpus before anything is built: beyond it the routing state
// alone outgrows memory (docs/simulator.md, "Limits").
void check_gpu_count(std::int64_t gpus, const std::string& where, const std::string& how) {
  if (gpus > kMaxGpus)
    throw ConfigError(where + ": " + how + " gives " + std::to_string(gpus) + " GPUs; weft sim handles up to " +
                      std::to_string(kMaxGpus));
}

void check_keys(const YAML::Node& map, const std::string& where, std::initializer_list<const char*> allowed) {
  if (!map.IsMap()) throw ConfigError(where + ": expected a mapping");
  std::set<std::string> seen;
  for (const auto& kv : map) {
    std::string key = kv.first.as<std::string>();
    // yaml-cpp keeps both entries of a repeated key and reads the first: refuse it.
    if (!seen.insert(key).second) throw ConfigError(where + ": key '" + key + "' is given twice");
    bool ok = false;
    std::string known;
    for (const char* a : allowed) {
      ok = ok || key == a;
      known += (known.empty() ? "" : ", ") + std::string(a);
    }
    if (!ok) throw ConfigError(where + ": unknown key '" + key + "' (known: " + known + ")");
  }
}

std::string str(const YAML::Node& n, const std::string& where) {
  if (!n.IsScalar()) throw ConfigError(where + ": expected a value");
  return n.as<std::string>();
}

int integer(const YAML::Node& map, const char* key, int fallback, int lo, int hi, const std::string& where) {
  if (!map[key]) return fallback;
  std::string s = str(map[key], where + "." + key);
  try {
    std::size_t pos = 0;
    long v = std::stol(s, &pos);
    if (pos != s.size() || v < lo || v > hi) throw 0;
    return static_cast<int>(v);
  } catch (...) {
    throw ConfigError(where + "." + key + ": '" + s + "' must be an integer in [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + "]");
  }
}

double rate(const YAML::Node& map, const char* key, double fallback, const std::string& where) {
  if (!map[key]) return fallback;
  return parse_rate(str(map[key], where + "." + key), where + "." + key);
}

Time duration(const YAML::Node& map, const char* key, Time fallback, const std::string& where) {
  if (!map[key]) return fallback;
  return parse_time(str(map[key], where + "." + key), where + "." + key);
}

std::uint32_t gpu_ip(int host, int local) {
  return (10u << 24) | (static_cast<std::uint32_t>(host >> 8 & 255) << 16) |
         (static_cast<std::uint32_t>(host & 255) << 8) | static_cast<std::uint32_t>(local + 1);
}

struct SwitchDefaults {
  Time latency = 500 * kNs;
  int ports = 0;
};

// The topology's `switch: {latency, ports}` defaults.
SwitchDefaults switch_defaults(const YAML::Node& y, const std::string& where) {
  SwitchDefaults sw;
  if (y["switch"]) {
    check_keys(y["switch"], where + ".switch", {"latency", "ports"});
    sw.latency = duration(y["switch"], "latency", sw.latency, where + ".switch");
    sw.ports = integer(y["switch"], "ports", 0, 1, 1 << 16, where + ".switch");
  }
  return sw;
}

int add_switch(Topology& t, const std::string& name, const std::string& role, const SwitchDefaults& d) {
  Node n;
  n.name = name;
  n.kind = NodeKind::kSwitch;
  n.role = role;
  n.port_limit = d.ports;
  n.latency = d.latency;
  return t.add_node(n);
}

// Hosts: GPUs, an optional NVSwitch domain, and NICs (one per GPU, or shared). Returns,
// per host, the nodes that carry NIC ports into the fabric (the GPU itself when it has
// its own NIC).
struct HostSpec {
  int hosts = 1, gpus_per_host = 1, gpus_per_nic = 1, nic_ports = 1;
  double nic_bps = 400e9, pcie_bps = 512e9, nvlink_bps = 0;
  Time pcie_latency = 500 * kNs, nvlink_latency = 200 * kNs;
  bool pcie = false;  // a NIC per GPU as its own node behind a PCIe link (shared NICs always are)
  bool transit = false;
};

std::vector<std::vector<int>> add_hosts(Topology& t, const HostSpec& h, const SwitchDefaults& sw) {
  std::vector<std::vector<int>> nics(h.hosts);
  t.gpus_per_host = h.gpus_per_host;
  for (int host = 0; host < h.hosts; ++host) {
    std::string hname = "host" + std::to_string(host);
    std::vector<int> gpu_nodes;
    for (int g = 0; g < h.gpus_per_host; ++g) {
      Node n;
      n.name = hname + ".gpu" + std::to_string(g);
      n.kind = NodeKind::kGpu;
      n.role = "gpu";
      n.host = host;
      n.local = g;
      n.ip = gpu_ip(host, g);
      n.transit = h.transit;
      int id = t.add_node(n);
      gpu_nodes.push_back(id);
      t.gpus.push_back(id);
    }
    if (h.nvlink_bps > 0 && h.gpus_per_host > 1) {
      SwitchDefaults nv{h.nvlink_latency, 0};
      int nvs = add_switch(t, hname + ".nvswitch", "nvswitch", nv);
      t.nodes[nvs].host = host;
      for (int g : gpu_nodes) t.add_link(g, nvs, h.nvlink_bps, 0, "nvlink");
    }
    if (h.gpus_per_nic == 1 && !h.pcie) {
      nics[host] = gpu_nodes;  // the NIC is the GPU's own port: PCIe folded into the GPU
    } else {
      for (int first = 0; first < h.gpus_per_host; first += h.gpus_per_nic) {
        Node n;
        n.name = hname + ".nic" + std::to_string(first / h.gpus_per_nic);
        n.kind = NodeKind::kNic;
        n.role = "nic";
        n.host = host;
        n.latency = sw.latency / 2;
        int nic = t.add_node(n);
        for (int g = first; g < first + h.gpus_per_nic; ++g) t.add_link(gpu_nodes[g], nic, h.pcie_bps, h.pcie_latency, "pcie");
        nics[host].push_back(nic);
      }
    }
  }
  return nics;
}

Topology make_rail_fabric(const YAML::Node& y, const std::string& where, const std::string& fabric) {
  Topology t;
  t.fabric = fabric;
  check_keys(y, where,
             {"name", "fabric", "hosts", "gpus_per_host", "nic", "nvlink", "switch", "link_delay", "rails_per_switch",
              "pods", "spines", "spine_speed", "oversubscription", "spines_per_leaf", "super_spines", "super_spine_speed"});
  HostSpec h;
  h.hosts = integer(y, "hosts", 2, 1, 1 << 20, where);
  h.gpus_per_host = integer(y, "gpus_per_host", 1, 1, 64, where);
  check_gpu_count(static_cast<std::int64_t>(h.hosts) * h.gpus_per_host, where,
                  std::to_string(h.hosts) + " hosts of " + std::to_string(h.gpus_per_host) + " GPUs");
  if (y["nic"]) {
    const YAML::Node& nic = y["nic"];
    check_keys(nic, where + ".nic", {"gpus_per_nic", "ports", "speed", "pcie_speed", "pcie_latency"});
    h.gpus_per_nic = integer(nic, "gpus_per_nic", 1, 1, 64, where + ".nic");
    h.nic_ports = integer(nic, "ports", 1, 1, 2, where + ".nic");
    h.nic_bps = rate(nic, "speed", h.nic_bps, where + ".nic");
    h.pcie_bps = rate(nic, "pcie_speed", h.pcie_bps, where + ".nic");
    h.pcie_latency = duration(nic, "pcie_latency", h.pcie_latency, where + ".nic");
    h.pcie = nic["pcie_speed"] || nic["pcie_latency"];
  }
  if (h.gpus_per_host % h.gpus_per_nic != 0)
    throw ConfigError(where + ".nic.gpus_per_nic: " + std::to_string(h.gpus_per_nic) + " does not divide gpus_per_host " +
                      std::to_string(h.gpus_per_host));
  if (y["nvlink"]) {
    const YAML::Node& nv = y["nvlink"];
    check_keys(nv, where + ".nvlink", {"speed", "latency"});
    h.nvlink_bps = rate(nv, "speed", 900e9, where + ".nvlink");
    h.nvlink_latency = duration(nv, "latency", h.nvlink_latency, where + ".nvlink");
  }
  const SwitchDefaults sw = switch_defaults(y, where);
  Time delay = duration(y, "link_delay", 500 * kNs, where);
  int rails_per_switch = integer(y, "rails_per_switch", 1, 1, 64, where);
  int pods = integer(y, "pods", 1, 1, 4096, where);
  int nics_per_host = h.gpus_per_host / h.gpus_per_nic;
  if (nics_per_host % rails_per_switch != 0 && fabric != "single-switch")
    throw ConfigError(where + ".rails_per_switch: " + std::to_string(rails_per_switch) + " does not divide the " +
                      std::to_string(nics_per_host) + " NICs (rails) of a host");
  if (h.hosts % pods != 0)
    throw ConfigError(where + ".pods: " + std::to_string(pods) + " does not divide hosts " + std::to_string(h.hosts));
  if (fabric == "rail-only") {
    if (h.nvlink_bps <= 0 && h.gpus_per_host > 1)
      throw ConfigError(where + ": rail-only fabrics carry cross-rail traffic over NVLink; give nvlink: {speed: ...}");
    if (pods != 1) throw ConfigError(where + ": rail-only fabrics have one pod (no spines to join pods)");
    h.transit = true;
  }
  if (fabric == "single-switch" && pods != 1) throw ConfigError(where + ": single-switch fabrics have one pod");
  auto nics = add_hosts(t, h, sw);

  int hosts_per_pod = h.hosts / pods;
  int switches_per_plane = fabric == "single-switch" ? 1 : nics_per_host / rails_per_switch;
  // rail[pod][plane][index]
  std::vector<std::vector<std::vector<int>>> rails(pods, std::vector<std::vector<int>>(h.nic_ports));
  for (int pod = 0; pod < pods; ++pod)
    for (int plane = 0; plane < h.nic_ports; ++plane)
      for (int s = 0; s < switches_per_plane; ++s) {
        std::string name = fabric == "single-switch" ? "switch" : "rail-" + std::to_string(s);
        if (h.nic_ports > 1) name += plane == 0 ? "a" : "b";
        if (pods > 1) name = "pod" + std::to_string(pod) + "-" + name;
        rails[pod][plane].push_back(add_switch(t, name, fabric == "single-switch" ? "leaf" : "rail", sw));
      }
  for (int host = 0; host < h.hosts; ++host) {
    int pod = host / hosts_per_pod;
    for (int r = 0; r < nics_per_host; ++r)
      for (int plane = 0; plane < h.nic_ports; ++plane)
        t.add_link(nics[host][r], rails[pod][plane][fabric == "single-switch" ? 0 : r / rails_per_switch], h.nic_bps, delay,
                   "access");
  }
  if (fabric != "rail-optimized") {
    if (y["spines"] || y["super_spines"]) throw ConfigError(where + ": spines belong to rail-optimized fabrics, not " + fabric);
    return t;
  }
  int spines = integer(y, "spines", 0, 1, 1 << 16, where);
  if (spines == 0) throw ConfigError(where + ".spines: a rail-optimized fabric needs spines (or use fabric: rail-only)");
  double spine_bps = rate(y, "spine_speed", h.nic_bps, where);
  int oversub = integer(y, "oversubscription", 1, 1, 64, where);
  int down = hosts_per_pod * rails_per_switch;  // NIC ports per rail switch
  double up_bandwidth = down * h.nic_bps / oversub;
  int uplinks = static_cast<int>(up_bandwidth / spine_bps + 0.5);
  if (uplinks < 1 || std::abs(uplinks * spine_bps - up_bandwidth) > 1)
    throw ConfigError(where + ": a rail switch has " + std::to_string(down) + " host ports; oversubscription " +
                      std::to_string(oversub) + " at spine_speed needs a whole number of uplinks");
  int per_leaf = integer(y, "spines_per_leaf", spines, 1, spines, where);
  if (uplinks % per_leaf != 0)
    throw ConfigError(where + ": " + std::to_string(uplinks) + " uplinks per rail switch do not spread evenly over " +
                      std::to_string(per_leaf) + " spines");
  std::vector<std::vector<int>> spine_ids(pods);
  for (int pod = 0; pod < pods; ++pod) {
    for (int s = 0; s < spines; ++s)
      spine_ids[pod].push_back(add_switch(t, (pods > 1 ? "pod" + std::to_string(pod) + "-" : "") + "spine-" + std::to_string(s),
                                          "spine", sw));
    int leaf = 0;
    for (int plane = 0; plane < h.nic_ports; ++plane)
      for (int r : rails[pod][plane]) {
        for (int i = 0; i < per_leaf; ++i) {
          // Partial cabling (spines_per_leaf < spines): leaf j uses spines j, j+1, ... so
          // that no spine is reachable from every leaf (seed 002 ch. 13).
          int s = (leaf + i) % spines;
          for (int k = 0; k < uplinks / per_leaf; ++k) t.add_link(r, spine_ids[pod][s], spine_bps, delay, "spine");
        }
        ++leaf;
      }
  }
  if (pods == 1) {
    if (y["super_spines"]) throw ConfigError(where + ": super_spines join pods; this fabric has one pod");
    return t;
  }
  int supers = integer(y, "super_spines", 0, 1, 1 << 16, where);
  if (supers == 0) throw ConfigError(where + ".super_spines: " + std::to_string(pods) + " pods need super-spines (3-tier)");
  double super_bps = rate(y, "super_spine_speed", spine_bps, where);
  std::vector<int> super_ids;
  for (int s = 0; s < supers; ++s) super_ids.push_back(add_switch(t, "super-spine-" + std::to_string(s), "super-spine", sw));
  int leaves = switches_per_plane * h.nic_ports;
  double spine_down = static_cast<double>(leaves) * uplinks / per_leaf * (static_cast<double>(per_leaf) / spines) * spine_bps;
  int sup_links = static_cast<int>(spine_down / oversub / super_bps + 0.5);
  if (sup_links < supers || sup_links % supers != 0)
    throw ConfigError(where + ": a spine's " + std::to_string(sup_links) + " uplinks do not spread evenly over " +
                      std::to_string(supers) + " super-spines");
  for (int pod = 0; pod < pods; ++pod)
    for (int s : spine_ids[pod])
      for (int x : super_ids)
        for (int k = 0; k < sup_links / supers; ++k) t.add_link(s, x, super_bps, delay, "super-spine");
  return t;
}

Topology make_custom(const YAML::Node& y, const std::string& where) {
  Topology t;
  t.fabric = "custom";
  check_keys(y, where, {"name", "fabric", "switch", "switches", "hosts", "links", "link_delay", "speed"});
  const SwitchDefaults sw = switch_defaults(y, where);
  Time delay = duration(y, "link_delay", 500 * kNs, where);
  double bps = rate(y, "speed", 100e9, where);
  if (!y["hosts"] || !y["hosts"].IsSequence()) throw ConfigError(where + ".hosts: a list of hosts is required");
  int host = 0;
  for (const auto& hn : y["hosts"]) {
    std::string w = where + ".hosts[" + std::to_string(host) + "]";
    check_keys(hn, w, {"name", "gpus", "transit"});
    std::string name = hn["name"] ? str(hn["name"], w + ".name") : "host" + std::to_string(host);
    int gpus = integer(hn, "gpus", 1, 1, 64, w);
    check_gpu_count(static_cast<std::int64_t>(t.gpus.size()) + gpus, where + ".hosts", "the host list");
    for (int g = 0; g < gpus; ++g) {
      Node n;
      n.name = gpus == 1 ? name : name + ".gpu" + std::to_string(g);
      if (t.find(n.name) >= 0) throw ConfigError(w + ": duplicate name " + n.name);
      n.kind = NodeKind::kGpu;
      n.role = "gpu";
      n.host = host;
      n.local = g;
      n.ip = gpu_ip(host, g);
      if (hn["transit"]) {
        const std::string value = str(hn["transit"], w + ".transit");
        if (value != "true" && value != "false")
          throw ConfigError(w + ".transit: expected true or false, got '" + value + "'");
        n.transit = value == "true";
      }
      t.gpus.push_back(t.add_node(n));
    }
    ++host;
  }
  if (y["switches"]) {
    int i = 0;
    for (const auto& sn : y["switches"]) {
      std::string w = where + ".switches[" + std::to_string(i++) + "]";
      check_keys(sn, w, {"name", "role", "ports", "latency"});
      if (!sn["name"]) throw ConfigError(w + ": a switch needs a name");
      std::string name = str(sn["name"], w + ".name");
      if (t.find(name) >= 0) throw ConfigError(w + ": duplicate name " + name);
      SwitchDefaults d = sw;
      d.ports = integer(sn, "ports", sw.ports, 1, 1 << 16, w);
      d.latency = duration(sn, "latency", sw.latency, w);
      add_switch(t, name, sn["role"] ? str(sn["role"], w + ".role") : "switch", d);
    }
  }
  if (!y["links"] || !y["links"].IsSequence()) throw ConfigError(where + ".links: a list of links is required");
  int i = 0;
  for (const auto& ln : y["links"]) {
    std::string w = where + ".links[" + std::to_string(i++) + "]";
    std::string a, b;
    double lbps = bps;
    Time ldelay = delay;
    std::string tier = "access";
    int count = 1;
    if (ln.IsSequence()) {
      if (ln.size() != 2) throw ConfigError(w + ": expected [a, b]");
      a = str(ln[0], w);
      b = str(ln[1], w);
    } else {
      check_keys(ln, w, {"a", "b", "speed", "delay", "tier", "count"});
      if (!ln["a"] || !ln["b"]) throw ConfigError(w + ": a link needs a and b");
      a = str(ln["a"], w + ".a");
      b = str(ln["b"], w + ".b");
      lbps = rate(ln, "speed", bps, w);
      ldelay = duration(ln, "delay", delay, w);
      if (ln["tier"]) tier = str(ln["tier"], w + ".tier");
      count = integer(ln, "count", 1, 1, 1024, w);
    }
    int ia = t.find(a), ib = t.find(b);
    if (ia < 0) throw ConfigError(w + ": unknown node '" + a + "'");
    if (ib < 0) throw ConfigError(w + ": unknown node '" + b + "'");
    if (ia == ib) throw ConfigError(w + ": a link from " + a + " to itself");
    for (int k = 0; k < count; ++k) t.add_link(ia, ib, lbps, ldelay, tier);
  }
  return t;
}

}  // namespace

Topology make_fat_tree(const FatTreeSpec& spec) {
  if (spec.k < 2 || spec.k % 2 != 0) throw ConfigError("fat-tree: k must be even and >= 2, got " + std::to_string(spec.k));
  check_gpu_count(static_cast<std::int64_t>(spec.k) * spec.k * spec.k / 4, "fat-tree",
                  "k = " + std::to_string(spec.k) + " (k^3/4 hosts)");
  Topology t;
  t.fabric = "fat-tree";
  t.name = "fat-tree-k" + std::to_string(spec.k);
  int k = spec.k, half = k / 2;
  SwitchDefaults sw{spec.switch_latency, k};
  for (int pod = 0; pod < k; ++pod)
    for (int e = 0; e < half; ++e)
      for (int hst = 0; hst < half; ++hst) {
        int host = (pod * half + e) * half + hst;
        Node n;
        n.name = "host" + std::to_string(host);
        n.kind = NodeKind::kGpu;
        n.role = "gpu";
        n.host = host;
        n.local = 0;
        n.ip = gpu_ip(host, 0);
        t.gpus.push_back(t.add_node(n));
      }
  std::vector<int> core;
  for (int c = 0; c < half * half; ++c) core.push_back(add_switch(t, "core-" + std::to_string(c), "core", sw));
  for (int pod = 0; pod < k; ++pod) {
    std::vector<int> edge, agg;
    for (int i = 0; i < half; ++i) {
      edge.push_back(add_switch(t, "pod" + std::to_string(pod) + "-edge-" + std::to_string(i), "edge", sw));
      agg.push_back(add_switch(t, "pod" + std::to_string(pod) + "-agg-" + std::to_string(i), "agg", sw));
    }
    for (int e = 0; e < half; ++e) {
      for (int hst = 0; hst < half; ++hst) t.add_link(t.gpus[(pod * half + e) * half + hst], edge[e], spec.bps, spec.delay, "access");
      for (int a = 0; a < half; ++a) t.add_link(edge[e], agg[a], spec.bps, spec.delay, "spine");
    }
    for (int a = 0; a < half; ++a)
      for (int c = 0; c < half; ++c) t.add_link(agg[a], core[a * half + c], spec.bps, spec.delay, "super-spine");
  }
  return t;
}

Topology parse_topology(const std::string& yaml_text, const std::string& source_name) {
  YAML::Node y;
  try {
    y = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(source_name + ": not valid YAML (line " + std::to_string(e.mark.line + 1) + ": " + e.msg + ")");
  }
  if (!y.IsMap()) throw ConfigError(source_name + ": expected a mapping with a 'fabric' key");
  try {
    // Every fabric may give its switches in-network reduction (SHARP, NVLS).
    bool reduction = false;
    if (y["in_network_reduction"]) {
      const std::string v = str(y["in_network_reduction"], source_name + ".in_network_reduction");
      if (v != "on" && v != "off" && v != "true" && v != "false")
        throw ConfigError(source_name + ".in_network_reduction: '" + v + "' must be on or off");
      reduction = v == "on" || v == "true";
      y.remove("in_network_reduction");
    }
    std::string fabric = y["fabric"] ? str(y["fabric"], source_name + ".fabric") : "";
    Topology t;
    if (fabric == "single-switch" || fabric == "rail-only" || fabric == "rail-optimized") {
      t = make_rail_fabric(y, source_name, fabric);
    } else if (fabric == "fat-tree") {
      check_keys(y, source_name, {"name", "fabric", "k", "speed", "link_delay", "switch"});
      FatTreeSpec spec;
      spec.k = integer(y, "k", 4, 2, 128, source_name);
      spec.bps = rate(y, "speed", spec.bps, source_name);
      spec.delay = duration(y, "link_delay", spec.delay, source_name);
      if (y["switch"]) {
        check_keys(y["switch"], source_name + ".switch", {"latency"});
        spec.switch_latency = duration(y["switch"], "latency", spec.switch_latency, source_name + ".switch");
      }
      t = make_fat_tree(spec);
    } else if (fabric == "custom") {
      t = make_custom(y, source_name);
    } else {
      throw ConfigError(source_name + ".fabric: '" + fabric +
                        "' is not a fabric (single-switch, rail-only, rail-optimized, fat-tree, custom)");
    }
    t.name = y["name"] ? str(y["name"], source_name + ".name") : (t.name.empty() ? t.fabric : t.name);
    t.validate();
    if (reduction) t.add_reducers();
    return t;
  } catch (const YAML::Exception& e) {
    throw ConfigError(source_name + ": " + e.msg);
  }
}

Topology load_topology(const std::string& path) {
  if (!file_exists(path)) throw ConfigError("topology file " + path + " does not exist");
  std::string text;
  try {
    text = read_file(path);
  } catch (const Error& e) {
    throw ConfigError(e.what());
  }
  return parse_topology(text, path);
}

}  // namespace weft::sim
