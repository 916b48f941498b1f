#include "weft/sim/stall.h"

#include <algorithm>
#include <map>
#include <set>

#include "weft/sim/network.h"

namespace weft::sim {

std::vector<int> find_cycle(const std::vector<std::vector<int>>& edges) {
  const int n = static_cast<int>(edges.size());
  std::vector<char> state(static_cast<std::size_t>(n), 0);  // 0 unseen, 1 on the path, 2 done
  std::vector<std::pair<int, std::size_t>> path;            // (node, next edge to follow)
  for (int root = 0; root < n; ++root) {
    if (state[root]) continue;
    path.assign(1, {root, 0});
    state[root] = 1;
    while (!path.empty()) {
      auto& [u, next] = path.back();
      if (next == edges[u].size()) {
        state[u] = 2;
        path.pop_back();
        continue;
      }
      const int v = edges[u][next++];
      if (v < 0 || v >= n || state[v] == 2) continue;
      if (state[v] == 1) {  // back to a node on the path: the cycle is the path from v
        std::vector<int> cycle;
        auto from = std::find_if(path.begin(), path.end(), [&](const auto& e) { return e.first == v; });
        for (auto it = from; it != path.end(); ++it) cycle.push_back(it->first);
        return cycle;
      }
      state[v] = 1;
      path.push_back({v, 0});
    }
  }
  return {};
}

Stall find_stall(const Network& net, bool time_limit) {
  Stall s;
  s.time_limit = time_limit;
  const std::size_t A = net.agents().count();
  std::vector<int> wait_index(A, -1);
  for (std::size_t a = 0; a < A; ++a) {
    const AgentState& st = net.agents().state(static_cast<int>(a));
    if (st.done) continue;
    RankWait w;
    w.agent = static_cast<int>(a);
    w.step = st.step;
    w.steps = net.workload().agents[a].steps.size();
    w.started = st.started && st.pending > 0;
    for (const auto& [peer, count] : st.waiting)
      if (count > 0) w.receives.push_back({peer, static_cast<int>(count)});
    std::sort(w.receives.begin(), w.receives.end());
    wait_index[a] = static_cast<int>(s.waits.size());
    s.waits.push_back(std::move(w));
  }
  // Sends not yet acknowledged, and those whose receiver is unreachable now.
  std::set<std::pair<int, int>> unroutable;
  for (const FlowRecord& f : net.agents().flows()) {
    if (f.parts_left_tx <= 0 || wait_index[f.src_agent] < 0) continue;
    s.waits[wait_index[f.src_agent]].unacknowledged.push_back(f.dst_agent);
    if (net.fabric().routes_to(net.topology().gpus[f.src_gpu], f.dst_gpu).n == 0) unroutable.insert({f.src_agent, f.dst_agent});
  }
  s.unroutable.assign(unroutable.begin(), unroutable.end());
  // Ranks waiting for each other's messages: a wait for a message already on its way (sent,
  // not all received: the run was stopped before it arrived, or the fabric holds it) is no
  // edge of a deadlocked workload.
  std::set<std::pair<int, int>> on_the_way;  // (sender, receiver)
  for (const FlowRecord& f : net.agents().flows())
    if (f.start != kNever && f.parts_left_rx > 0) on_the_way.insert({f.src_agent, f.dst_agent});
  std::vector<std::vector<int>> waits_for(A);
  for (const RankWait& w : s.waits)
    if (w.started)
      for (const auto& [peer, count] : w.receives)
        if (!net.agents().state(peer).done && !on_the_way.count({peer, w.agent})) waits_for[w.agent].push_back(peer);
  s.rank_cycle = find_cycle(waits_for);
  // Paused links: egress port O waits for O' when O's receiver pauses it on a buffer that
  // holds packets queued at O' (they came in through O's link) and O' is paused too.
  const Time now = net.finish_time();  // where the run stopped
  for (int q = 0; q < 8 && s.pfc_cycle.empty(); ++q) {
    std::vector<std::vector<int>> waits_on(net.ports().size());
    bool any = false;
    for (std::size_t o = 0; o < net.ports().size(); ++o) {
      const Port& O = net.ports()[o];
      if (!O.c[q].paused(now) || !O.holds(q)) continue;
      std::set<int> upstream;
      auto came_in_by = [&](int in) {
        if (in >= 0 && net.ports()[net.ports()[in].peer].c[q].paused(now)) upstream.insert(net.ports()[in].peer);
      };
      if (const VirtualOutputQueues* v = net.fabric().voq_of(static_cast<int>(o), q)) {
        const auto& own = net.fabric().node_ports(O.node);
        for (int i = 0; i < v->inputs(); ++i)
          if (!v->empty(i)) came_in_by(own[static_cast<std::size_t>(i)]);
      } else {
        O.c[q].queue.for_each(net.packets(), [&](std::uint32_t id) { came_in_by(net.packets().at(id).port); });
      }
      for (int u : upstream) waits_on[u].push_back(static_cast<int>(o));
      any = any || !upstream.empty();
    }
    if (!any) continue;
    s.pfc_cycle = find_cycle(waits_on);
    if (!s.pfc_cycle.empty()) s.pfc_queue = q;
  }
  return s;
}

std::vector<std::string> describe_stall(const Network& net, const Stall& s, std::size_t max_ranks) {
  const Workload& w = net.workload();
  const Topology& t = net.topology();
  std::vector<std::string> lines;
  auto name = [&](int a) { return agent_name(w, a); };
  auto plural = [](std::size_t n, const char* one, const char* many) { return std::to_string(n) + " " + (n == 1 ? one : many); };
  for (std::size_t i = 0; i < s.waits.size() && i < max_ranks; ++i) {
    const RankWait& r = s.waits[i];
    std::string line = "  " + name(r.agent) + ": step " + std::to_string(r.step + 1) + " of " + std::to_string(r.steps);
    if (!r.started) {
      line += ", computing before it";
    } else {
      std::string parts;
      for (const auto& [peer, count] : r.receives)
        parts += (parts.empty() ? "" : ", ") + plural(static_cast<std::size_t>(count), "message", "messages") + " from " + name(peer);
      if (!parts.empty()) line += ", waiting for " + parts;
      if (!r.unacknowledged.empty()) {
        std::set<int> peers(r.unacknowledged.begin(), r.unacknowledged.end());
        std::string to;
        for (int p : peers) to += (to.empty() ? "" : ", ") + name(p);
        line += ", " + plural(r.unacknowledged.size(), "send", "sends") + " not acknowledged (to " + to + ")";
      }
    }
    lines.push_back(line);
  }
  if (s.waits.size() > max_ranks) lines.push_back("  ... and " + plural(s.waits.size() - max_ranks, "more rank", "more ranks"));
  if (!s.rank_cycle.empty()) {
    std::string cycle;
    for (int a : s.rank_cycle) cycle += name(a) + " -> ";
    lines.push_back("deadlock: " + cycle + name(s.rank_cycle.front()) +
                    " (each waits for a message from the next before it sends its own)");
  }
  if (!s.pfc_cycle.empty()) {
    std::string cycle;
    for (int p : s.pfc_cycle) cycle += net.port_name(p) + ", ";
    lines.push_back("PFC deadlock on traffic class " + std::to_string(s.pfc_queue) + ": a cycle of paused links " + cycle +
                    "back to " + net.port_name(s.pfc_cycle.front()) +
                    " (each is paused by a buffer full of packets that wait for the next)");
  }
  auto host = [&](int a) { return t.nodes[t.gpus[w.agents[a].gpu]].name; };
  for (const auto& [from, to] : s.unroutable)
    lines.push_back("no route: " + name(from) + " (" + host(from) + ") cannot reach " + name(to) + " (" + host(to) +
                    "): the links or switches between them are down");
  const std::int64_t storms = net.counters().watchdog_storms;
  if (storms > 0)
    lines.push_back("the PFC watchdog broke " + plural(static_cast<std::size_t>(storms), "pause storm", "pause storms") +
                    " on the way (PFC deadlocks or stuck receivers; with --set pfc.watchdog=0 a cycle stays to be named)");
  else if (s.time_limit && s.rank_cycle.empty() && s.pfc_cycle.empty() && s.unroutable.empty())
    lines.push_back("no deadlock found: the run reached sim.time_limit (raise it with --set time_limit=...)");
  return lines;
}

}  // namespace weft::sim
