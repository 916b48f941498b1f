#include "weft/sim/pxn.h"

#include <map>
#include <utility>

namespace weft::sim {
int route_through_nvlink_peers(Workload& w, const Topology& t) {
  const std::vector<GpuAttachment> at = gpu_attachments(t);
  auto node_of = [&](int g) -> const Node& { return t.nodes[static_cast<std::size_t>(t.gpus[static_cast<std::size_t>(g)])]; };
  std::map<std::pair<int, int>, int> gpu_of;  // (host, local) -> GPU rank
  for (int g = 0; g < t.gpu_count(); ++g) gpu_of[{node_of(g).host, node_of(g).local}] = g;
  // The GPU that relays from GPU a to GPU b, or -1.
  auto relay_gpu = [&](int a, int b) {
    if (a >= t.gpu_count() || b >= t.gpu_count()) return -1;  // a switch's reducer: not on a rail of GPUs
    const GpuAttachment &from = at[static_cast<std::size_t>(a)], &to = at[static_cast<std::size_t>(b)];
    if (node_of(a).host < 0 || node_of(a).host == node_of(b).host || from.nvlink_bps <= 0 ||
        from.network_switch == to.network_switch)
      return -1;
    auto peer = gpu_of.find({node_of(a).host, node_of(b).local});
    if (peer == gpu_of.end() || peer->second == a) return -1;
    const GpuAttachment& p = at[static_cast<std::size_t>(peer->second)];
    return p.nvlink_bps > 0 && p.network_switch == to.network_switch ? peer->second : -1;
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
