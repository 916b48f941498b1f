#include "weft/sim/pxn.h"

#include <map>
#include <utility>

namespace weft::sim {
namespace {

// Per GPU rank: its host, its NVLink (whether it has one), and the switch its NIC hangs off.
struct GpuPlace {
  int host = -1, local = -1, nic_switch = -1;
  bool nvlink = false;
};

std::vector<GpuPlace> places(const Topology& t) {
  std::vector<std::vector<int>> links_of(t.nodes.size());
  for (std::size_t i = 0; i < t.links.size(); ++i) {
    links_of[static_cast<std::size_t>(t.links[i].a)].push_back(static_cast<int>(i));
    links_of[static_cast<std::size_t>(t.links[i].b)].push_back(static_cast<int>(i));
  }
  auto other = [&](int link, int node) { return t.links[static_cast<std::size_t>(link)].a == node ? t.links[static_cast<std::size_t>(link)].b : t.links[static_cast<std::size_t>(link)].a; };
  std::vector<GpuPlace> out(static_cast<std::size_t>(t.gpu_count()));
  for (int g = 0; g < t.gpu_count(); ++g) {
    const int node = t.gpus[static_cast<std::size_t>(g)];
    GpuPlace& p = out[static_cast<std::size_t>(g)];
    p.host = t.nodes[static_cast<std::size_t>(node)].host;
    p.local = t.nodes[static_cast<std::size_t>(node)].local;
    for (int l : links_of[static_cast<std::size_t>(node)]) {
      const std::string& tier = t.links[static_cast<std::size_t>(l)].tier;
      const int o = other(l, node);
      if (tier == "nvlink") {
        p.nvlink = true;
      } else if (p.nic_switch < 0 && t.nodes[static_cast<std::size_t>(o)].kind == NodeKind::kSwitch) {
        p.nic_switch = o;
      } else if (p.nic_switch < 0 && t.nodes[static_cast<std::size_t>(o)].kind == NodeKind::kNic) {
        for (int m : links_of[static_cast<std::size_t>(o)])
          if (t.nodes[static_cast<std::size_t>(other(m, o))].kind == NodeKind::kSwitch) p.nic_switch = other(m, o);
      }
    }
  }
  return out;
}

}  // namespace

int route_through_nvlink_peers(Workload& w, const Topology& t) {
  const std::vector<GpuPlace> at = places(t);
  std::map<std::pair<int, int>, int> gpu_of;  // (host, local) -> GPU rank
  for (std::size_t g = 0; g < at.size(); ++g) gpu_of[{at[g].host, at[g].local}] = static_cast<int>(g);
  // The GPU that relays from GPU a to GPU b, or -1.
  auto relay_gpu = [&](int a, int b) {
    const int gpus = static_cast<int>(at.size());
    if (a >= gpus || b >= gpus) return -1;  // a switch's reducer: not on a rail of GPUs
    const GpuPlace &from = at[static_cast<std::size_t>(a)], &to = at[static_cast<std::size_t>(b)];
    if (from.host < 0 || from.host == to.host || !from.nvlink || from.nic_switch == to.nic_switch) return -1;
    auto peer = gpu_of.find({from.host, to.local});
    if (peer == gpu_of.end() || peer->second == a) return -1;
    const GpuPlace& p = at[static_cast<std::size_t>(peer->second)];
    return p.nvlink && p.nic_switch == to.nic_switch ? peer->second : -1;
  };
  std::map<std::pair<int, int>, int> relay_of;  // (sender, receiver) agents -> relay agent
  std::vector<Agent> relays;
  const int agents = static_cast<int>(w.agents.size());
  for (int a = 0; a < agents; ++a) {
    for (WorkStep& step : w.agents[static_cast<std::size_t>(a)].steps) {
      for (Transfer& s : step.sends) {
        const int gpu = relay_gpu(w.agents[static_cast<std::size_t>(a)].gpu, w.agents[static_cast<std::size_t>(s.peer)].gpu);
        if (gpu < 0 || s.bytes == 0) continue;
        auto [it, fresh] = relay_of.try_emplace({a, s.peer}, agents + static_cast<int>(relays.size()));
        if (fresh) {
          Agent r;
          r.job = w.agents[static_cast<std::size_t>(a)].job;
          r.rank = w.agents[static_cast<std::size_t>(a)].rank;
          r.gpu = gpu;
          r.queue = w.agents[static_cast<std::size_t>(a)].queue;
          r.relay = true;
          relays.push_back(r);
        }
        Agent& relay = relays[static_cast<std::size_t>(it->second - agents)];
        WorkStep in, out;
        in.collective = out.collective = step.collective;
        in.recvs.push_back({a, s.bytes});
        out.sends.push_back({s.peer, s.bytes});
        relay.steps.push_back(std::move(in));
        relay.steps.push_back(std::move(out));
        s.peer = it->second;
      }
    }
  }
  // The receivers hear the relayed messages from their relays (in the same order: one relay
  // per pair keeps them in order).
  for (int b = 0; b < agents; ++b)
    for (WorkStep& step : w.agents[static_cast<std::size_t>(b)].steps)
      for (Transfer& r : step.recvs) {
        auto it = relay_of.find({r.peer, b});
        if (it != relay_of.end() && r.bytes > 0) r.peer = it->second;
      }
  for (Agent& r : relays) w.agents.push_back(std::move(r));
  return static_cast<int>(relays.size());
}

}  // namespace weft::sim
