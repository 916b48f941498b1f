// Ports, switches and links of the simulated fabric: transmission, routing and load
// balancing, shared buffers, WRED/ECN marking, PFC, failures.
#include "weft/sim/fabric.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <unordered_map>

#include "weft/sim/nic.h"
#include "weft/util/error.h"
#include "weft/util/machine.h"

namespace weft::sim {
namespace {

constexpr std::uint32_t kNone = ~0u;

}  // namespace

Fabric::Fabric(Engine& engine, PacketPool& pool, Nic& nic, const Topology& topo, const SimConfig& cfg,
               const std::vector<Failure>& failures)
    : eng_(engine), pool_(pool), nic_(nic), topo_(topo), cfg_(cfg), failures_(failures), columns_(RouteColumns::of(topo)) {
  kTxDone = eng_.add_kind(this, on_tx_done, prefetch_tx_done);
  kArrive = eng_.add_kind(this, on_arrive, prefetch_arrive);
  kPauseExpire = eng_.add_kind(this, on_pause_expire);
  kPauseRefresh = eng_.add_kind(this, on_pause_refresh);
  kEndpointWake = eng_.add_kind(this, on_endpoint_wake);
  kFailure = eng_.add_kind(this, on_failure);
  kReroute = eng_.add_kind(this, on_reroute);
}

void Fabric::prepare() {
  for (const Failure& f : failures_) {
    if (topo_.find(f.a) < 0) throw ConfigError("failure: unknown node '" + f.a + "'");
    if (!f.b.empty() && topo_.find(f.b) < 0) throw ConfigError("failure: unknown node '" + f.b + "'");
  }
  build_ports();
  gpu_rank_of_node_.assign(topo_.nodes.size(), -1);
  for (std::size_t r = 0; r < topo_.gpus.size(); ++r) gpu_rank_of_node_[topo_.gpus[r]] = static_cast<int>(r);
  compute_routes();
  switch_seed_.resize(topo_.nodes.size());
  for (std::size_t n = 0; n < topo_.nodes.size(); ++n)
    switch_seed_[n] = static_cast<std::uint32_t>(splitmix(cfg_.seed * 1000003ull + (cfg_.distinct_seeds ? n : 0)));
  node_ip_.resize(topo_.nodes.size());
  for (std::size_t n = 0; n < topo_.nodes.size(); ++n) node_ip_[n] = topo_.nodes[n].ip;
  rr_counter_.assign(topo_.nodes.size(), 0);
  reserve_buffers();
}

void Fabric::begin(int shards) {
  per_thread_.assign(static_cast<std::size_t>(shards), {});
  for (std::size_t i = 0; i < failures_.size(); ++i) eng_.schedule(failures_[i].at, -1, kFailure, i);
}

void Fabric::build_ports() {
  const auto& nodes = topo_.nodes;
  node_ports_.assign(nodes.size(), {});
  link_port_.assign(topo_.links.size(), -1);
  ports_.reserve(topo_.links.size() * 2);
  for (std::size_t l = 0; l < topo_.links.size(); ++l) {
    const Link& link = topo_.links[l];
    int pa = static_cast<int>(ports_.size()), pb = pa + 1;
    ports_.emplace_back();
    ports_.emplace_back();
    for (int side = 0; side < 2; ++side) {
      Port& p = ports_[side == 0 ? pa : pb];
      p.node = side == 0 ? link.a : link.b;
      p.peer = side == 0 ? pb : pa;
      p.link = static_cast<int>(l);
      p.endpoint = nodes[static_cast<std::size_t>(p.node)].kind == NodeKind::kGpu;
      p.bps = link.bps;
      int receiver = side == 0 ? link.b : link.a;
      p.delay = link.delay + nodes[receiver].latency;
      for (int q = 0; q < 8; ++q) p.c[q].paused_since = kNever;
      p.jitter = std::min<Time>(cfg_.link_jitter, serialization(kPauseFrame, p.bps) * 9 / 10);
      p.jitter_ps = static_cast<std::uint32_t>(std::min<Time>(p.jitter, ~std::uint32_t{0}));
      p.peer_node = receiver;
      node_ports_[p.node].push_back(side == 0 ? pa : pb);
    }
    link_port_[l] = pa;
  }
  if (cfg_.switching == Switching::kCutThrough) {
    // A switch cuts through the frames of a link at least as fast as its fastest port.
    std::vector<double> fastest(nodes.size(), 0);
    for (const Port& p : ports_) fastest[static_cast<std::size_t>(p.node)] = std::max(fastest[static_cast<std::size_t>(p.node)], p.bps);
    for (Port& p : ports_) {
      const int receiver = ports_[static_cast<std::size_t>(p.peer)].node;
      p.cut_through = nodes[static_cast<std::size_t>(receiver)].kind == NodeKind::kSwitch && p.bps >= fastest[static_cast<std::size_t>(receiver)];
    }
  }
  port_up_.assign(ports_.size(), 1);
  port_slot_.assign(ports_.size(), -1);
  for (const std::vector<int>& own : node_ports_)
    for (std::size_t i = 0; i < own.size(); ++i) port_slot_[static_cast<std::size_t>(own[i])] = static_cast<int>(i);
  if (cfg_.queuing == Queuing::kVirtualOutput) {
    // Per switch port and class, a queue per port of the switch, sized when the class first
    // queues a packet there (most ports carry one or two classes).
    voqs_.assign(ports_.size() * 8, {});
  }
  // The port from each anchored GPU's switch to it (the end of its one link at the switch).
  anchor_port_.assign(topo_.gpus.size(), -1);
  for (std::size_t d = 0; d < topo_.gpus.size(); ++d)
    if (const int l = columns_.last_link[d]; l >= 0) {
      const int pa = link_port_[static_cast<std::size_t>(l)];
      anchor_port_[d] = ports_[static_cast<std::size_t>(pa)].node == topo_.gpus[d] ? pa + 1 : pa;
    }
}

RouteColumns RouteColumns::of(const Topology& t) {
  RouteColumns r;
  std::vector<int> degree(t.nodes.size(), 0), neighbour(t.nodes.size(), -1), link_of(t.nodes.size(), -1);
  for (std::size_t l = 0; l < t.links.size(); ++l) {
    const Link& L = t.links[l];
    for (auto [n, other] : {std::pair{L.a, L.b}, std::pair{L.b, L.a}}) {
      ++degree[static_cast<std::size_t>(n)];
      neighbour[static_cast<std::size_t>(n)] = other;
      link_of[static_cast<std::size_t>(n)] = static_cast<int>(l);
    }
  }
  r.routed_nodes = static_cast<int>(std::count_if(degree.begin(), degree.end(), [](int k) { return k > 1; }));
  std::vector<int> column_of_anchor(t.nodes.size(), -1);
  r.of_gpu.resize(t.gpus.size());
  r.last_link.assign(t.gpus.size(), -1);
  for (std::size_t d = 0; d < t.gpus.size(); ++d) {
    const auto g = static_cast<std::size_t>(t.gpus[d]);
    const int anchor = degree[g] == 1 ? neighbour[g] : -1;
    if (anchor >= 0 && t.nodes[static_cast<std::size_t>(anchor)].kind == NodeKind::kSwitch) {
      int& col = column_of_anchor[static_cast<std::size_t>(anchor)];
      if (col < 0) {
        col = r.count();
        r.target.push_back(anchor);
      }
      r.of_gpu[d] = col;
      r.last_link[d] = link_of[g];
    } else {
      r.of_gpu[d] = r.count();
      r.target.push_back(static_cast<int>(g));
    }
  }
  return r;
}

Fabric::Candidates Fabric::routes_to(int node, int dst_gpu) const {
  const auto d = static_cast<std::size_t>(dst_gpu);
  const auto col = static_cast<std::size_t>(columns_.of_gpu[d]);
  if (const std::int32_t& last = anchor_port_[d]; last >= 0) {
    // Behind an anchor switch: the GPU is cut off when its one link is down, and the
    // anchor's port to it is the last hop.
    if (!port_up_[static_cast<std::size_t>(last)]) return {nullptr, 0};
    if (node == columns_.target[col]) return {&last, 1};
  }
  const std::int32_t row = route_row_[static_cast<std::size_t>(node)];
  if (row < 0) {
    // A node with one link sends everything through it, when the node beyond reaches the
    // destination (or is it): such nodes keep no table.
    const std::int32_t& only = only_port_[static_cast<std::size_t>(node)];
    const Port& P = ports_[static_cast<std::size_t>(only)];
    if (!P.up) return {nullptr, 0};
    const int next = P.peer_node;
    if (next == topo_.gpus[d]) return {&only, 1};
    if (route_row_[static_cast<std::size_t>(next)] < 0 || routes_to(next, dst_gpu).n == 0) return {nullptr, 0};
    return {&only, 1};
  }
  const RouteSlot& r = route_slot(row, dst_gpu);
  return {route_pool_.data() + r.begin, static_cast<int>(r.count)};
}

void Fabric::compute_routes() {
  ++route_generation_;
  const std::size_t N = topo_.nodes.size(), C = static_cast<std::size_t>(columns_.count());
  // Tables for the nodes with several links only (switches, GPUs with NVLink and a NIC).
  route_row_.assign(N, -1);
  only_port_.assign(N, -1);
  std::size_t rows = 0;
  for (std::size_t n = 0; n < N; ++n) {
    if (node_ports_[n].size() == 1) only_port_[n] = node_ports_[n][0];
    else if (!node_ports_[n].empty()) route_row_[n] = static_cast<std::int32_t>(rows++);
  }
  route_slots_.assign(rows * C, RouteSlot{});
  route_pool_.clear();
  // Equal candidate lists are stored once (an edge switch's uplinks serve every remote
  // destination): a hash of the list to its first place in the pool.
  std::unordered_map<std::uint64_t, std::uint32_t> stored;
  std::vector<std::int32_t> list;
  std::vector<int> dist(N), frontier;
  // The graph in one array: the node at the far end of each port that is up (-1: down), by
  // node (first[n] .. first[n + 1]), in node_ports_ order; and the nodes that forward.
  std::vector<std::size_t> first(N + 1, 0);
  std::vector<int> far;
  std::vector<char> forwards(N, 0);
  std::vector<int> routed;  // nodes with a routing row
  for (std::size_t n = 0; n < N; ++n) {
    first[n] = far.size();
    for (int port : node_ports_[n]) far.push_back(ports_[port].up ? ports_[port].peer_node : -1);
    forwards[n] = !node_is_endpoint(static_cast<int>(n)) || topo_.nodes[n].transit ? 1 : 0;
    if (route_row_[n] >= 0) routed.push_back(static_cast<int>(n));
  }
  first[N] = far.size();
  for (std::size_t d = 0; d < C; ++d) {
    int target = columns_.target[d];
    std::fill(dist.begin(), dist.end(), -1);
    dist[target] = 0;
    frontier.assign(1, target);
    for (std::size_t head = 0; head < frontier.size(); ++head) {
      const int u = frontier[head];
      for (std::size_t i = first[u]; i < first[u + 1]; ++i) {
        const int v = far[i];
        if (v < 0 || dist[v] >= 0) continue;
        dist[v] = dist[u] + 1;
        if (forwards[v]) frontier.push_back(v);  // an endpoint is reached, not passed through
      }
    }
    for (int n : routed) {
      if (dist[n] <= 0) continue;
      list.clear();
      std::uint64_t h = 0x9E3779B97F4A7C15ull;
      for (std::size_t i = first[n]; i < first[n + 1]; ++i) {
        const int v = far[i];
        if (v >= 0 && dist[v] == dist[n] - 1 && (v == target || forwards[v])) {
          const int port = node_ports_[n][i - first[n]];
          list.push_back(port);
          h = splitmix(h ^ static_cast<std::uint64_t>(port));
        }
      }
      const std::size_t slot = static_cast<std::size_t>(route_row_[static_cast<std::size_t>(n)]) * C + d;
      route_slots_[slot].count = static_cast<std::uint32_t>(list.size());
      auto [it, fresh] = stored.try_emplace(h ^ list.size(), static_cast<std::uint32_t>(route_pool_.size()));
      if (!fresh && it->second + list.size() <= route_pool_.size() &&
          std::equal(list.begin(), list.end(), route_pool_.begin() + it->second)) {
        route_slots_[slot].begin = it->second;
        continue;
      }
      route_slots_[slot].begin = static_cast<std::uint32_t>(route_pool_.size());
      route_pool_.insert(route_pool_.end(), list.begin(), list.end());
    }
  }
}

std::uint32_t Fabric::hash_tuple(int node, const Packet& p) const {
  std::uint32_t seed = switch_seed_[node];
  std::uint32_t sip = node_ip_[static_cast<std::size_t>(p.src)], dip = node_ip_[static_cast<std::size_t>(p.dst)];
  if (cfg_.hash == HashFunction::kXor) return sip ^ dip ^ (static_cast<std::uint32_t>(p.sport) << 16 | kRocePort) ^ 17u ^ seed;
  unsigned char t[13] = {static_cast<unsigned char>(sip >> 24), static_cast<unsigned char>(sip >> 16),
                         static_cast<unsigned char>(sip >> 8),  static_cast<unsigned char>(sip),
                         static_cast<unsigned char>(dip >> 24), static_cast<unsigned char>(dip >> 16),
                         static_cast<unsigned char>(dip >> 8),  static_cast<unsigned char>(dip),
                         static_cast<unsigned char>(p.sport >> 8), static_cast<unsigned char>(p.sport),
                         static_cast<unsigned char>(kRocePort >> 8), static_cast<unsigned char>(kRocePort & 255),
                         17};
  // CRC-32 of the tuple, then the switch's seed through a non-linear mixer. CRC is affine in
  // its initial value (crc(s1, m) ^ crc(s2, m) is one constant for every m), so seeding the
  // CRC itself only XORs a constant into every choice: switches with "distinct" seeds would
  // still send all the flows that share a port on one switch through one port on the next.
  const auto crc = static_cast<std::uint32_t>(crc32(0, t, sizeof t));
  return static_cast<std::uint32_t>(splitmix(static_cast<std::uint64_t>(seed) << 32 | crc) >> 32);
}

int Fabric::choose_port(int node, Packet& p) {
  const int port = pick_port(node, p);
  return port >= 0 && ports_[port].up ? port : -1;  // a failed link the routes still use: none
}

int Fabric::pick_port(int node, Packet& p) {
  const Candidates next = routes_to(node, gpu_rank_of_node_[p.dst]);
  const std::int32_t* c = next.ports;
  const int n = next.n;
  if (n == 0) return -1;
  if (n == 1) return c[0];
  auto least_loaded = [&]() {
    std::uint32_t start = rr_counter_[node]++;
    int best = -1;
    std::int64_t best_load = 0;
    for (int i = 0; i < n; ++i) {
      int port = c[(start + static_cast<std::uint32_t>(i)) % static_cast<std::uint32_t>(n)];
      const std::int64_t load = ports_[port].load(p.queue, clock());
      if (best < 0 || load < best_load) {
        best = port;
        best_load = load;
      }
    }
    return best;
  };
  if (!ecmp_decides(p.type)) {  // data under spraying, adaptive routing or flowlets
    if (cfg_.lb == LoadBalancing::kSpray) {
      switch (cfg_.spray) {
        case SprayMode::kRandom: return c[eng_.rng(node).choice() % static_cast<std::uint64_t>(n)];
        case SprayMode::kRoundRobin: return c[rr_counter_[node]++ % static_cast<std::uint32_t>(n)];
        case SprayMode::kLeastLoaded: return least_loaded();
      }
    }
    if (cfg_.lb == LoadBalancing::kAdaptive && cfg_.ar_granularity == ArGranularity::kPacket) return adaptive_pick(node, p, c, n);
    if (cfg_.lb == LoadBalancing::kFlowlet || cfg_.lb == LoadBalancing::kAdaptive) {
      std::uint64_t key = static_cast<std::uint64_t>(node) << 32 | p.qp;
      auto& entry = mine().flowlets[key];
      Time now = clock();
      bool valid = false;
      if (entry.second != 0 && now - entry.second < cfg_.flowlet_gap)
        for (int i = 0; i < n; ++i) valid = valid || c[i] == entry.first;
      if (!valid) entry.first = cfg_.lb == LoadBalancing::kAdaptive ? adaptive_pick(node, p, c, n) : least_loaded();
      entry.second = now == 0 ? 1 : now;
      return entry.first;
    }
  }
  return ecmp_pick(c, n, hash_tuple(node, p));
}

int Fabric::fixed_port(int node, const QueuePair& q) const {
  const Candidates next = routes_to(node, gpu_rank_of_node_[q.dst]);
  if (next.n == 0) return kUnroutable;
  if (next.n == 1) return next.ports[0];
  if (!ecmp_decides(PacketType::kData)) return kChosenPerPacket;
  Packet probe;
  probe.src = q.src;
  probe.dst = q.dst;
  probe.sport = q.sport;
  return ecmp_pick(next.ports, next.n, hash_tuple(node, probe));
}

std::int64_t Fabric::signalled_queue(int port, int queue) {
  Port& P = ports_[static_cast<std::size_t>(port)];
  const Time now = clock();
  if (!P.c[queue].signalled || now - P.c[queue].signalled_at >= cfg_.ar_signal_interval) {
    P.c[queue].signalled = true;
    P.c[queue].signalled_at = now;
    P.c[queue].signalled_bytes = P.c[queue].queue_bytes;
  }
  return P.c[queue].signalled_bytes;
}

int Fabric::adaptive_pick(int node, const Packet& p, const std::int32_t* c, int n) {
  // Ties (an idle fabric) fall at random, as a switch's arbiter breaks them: no two
  // switches drift into the same order.
  const auto start = static_cast<std::uint32_t>(eng_.rng(node).choice() % static_cast<std::uint64_t>(n));
  const int dst_gpu = gpu_rank_of_node_[p.dst];
  int best = -1;
  std::int64_t best_load = 0;
  for (int i = 0; i < n; ++i) {
    const int port = c[(start + static_cast<std::uint32_t>(i)) % static_cast<std::uint32_t>(n)];
    const Port& P = ports_[static_cast<std::size_t>(port)];
    std::int64_t load = P.load(p.queue, clock());
    const int next = P.peer_node;
    if (cfg_.ar_remote && !node_is_endpoint(next)) {
      // The next switch's least queue toward the destination, as it signalled it.
      const Candidates onward = routes_to(next, dst_gpu);
      std::int64_t remote = onward.n > 0 ? std::numeric_limits<std::int64_t>::max() : 0;
      for (int k = 0; k < onward.n; ++k) remote = std::min(remote, signalled_queue(onward.ports[k], p.queue));
      load += remote;
    }
    if (best < 0 || load < best_load) {
      best = port;
      best_load = load;
    }
  }
  return best;
}

int Fabric::ecmp_pick(const std::int32_t* c, int n, std::uint32_t h) const {
  if (!cfg_.ecmp_weighted) return c[h % static_cast<std::uint32_t>(n)];
  double total = 0;
  for (int i = 0; i < n; ++i) total += ports_[static_cast<std::size_t>(c[i])].bps;
  double x = static_cast<double>(h) / 4294967296.0 * total;
  for (int i = 0; i < n; ++i) {
    x -= ports_[static_cast<std::size_t>(c[i])].bps;
    if (x < 0) return c[i];
  }
  return c[n - 1];
}

void Fabric::try_send(int port) {
  Port& P = ports_[port];
  if (!P.up) return;
  const Time now = clock();
  if (P.busy(now)) {
    wake_at_end(port);
    return;
  }
  std::uint32_t id = kNone;
  if (P.holds(Port::kControlBit)) {
    id = P.pop_control();
  } else {
    for (int q = 7; q >= cfg_.strict_queue && id == kNone; --q)
      if (P.holds(q) && !P.c[q].paused(now)) id = dequeue(port, q);
    if (id == kNone) {
      // Deficit round robin over the remaining queues, by configured weight.
      int eligible = 0, only = -1;
      for (int q = 0; q < cfg_.strict_queue && q < 8; ++q)
        if (P.holds(q) && !P.c[q].paused(now)) {
          ++eligible;
          only = q;
        }
      if (eligible == 1) {
        id = dequeue(port, only);
      } else if (eligible > 1) {
        for (int guard = 0; guard < 10000 && id == kNone; ++guard) {
          int q = P.dwrr_next;
          if (P.holds(q) && !P.c[q].paused(now)) {
            std::uint32_t head = queue_head(port, q);
            double size = pool_[head].frame + kWireOverhead;
            if (P.c[q].deficit >= size) {
              P.c[q].deficit -= size;
              id = dequeue(port, q);
              if (!P.holds(q)) P.c[q].deficit = 0;
              break;
            }
            P.c[q].deficit += cfg_.dwrr_weight[q] * static_cast<double>(cfg_.mtu + kHeaderBytes + kRethBytes + kWireOverhead);
          }
          P.dwrr_next = (q + 1) % std::max(1, std::min(cfg_.strict_queue, 8));
        }
      }
      if (id == kNone && P.endpoint) id = nic_.pull(P.node, port);
    }
    if (id != kNone && pool_[id].type != PacketType::kPause && pool_[id].port != -2) {
      // Left a queue (the NIC marks its fresh packets with port -2).
      Packet& p = pool_[id];
      std::int64_t wire = p.frame + kWireOverhead;
      P.c[p.queue].queue_bytes -= wire;
      if (p.port >= 0) dequeued_at_switch(port, p);
    }
  }
  if (id == kNone) return;
  transmit(port, id);
}

void Fabric::transmit(int port, std::uint32_t id) {
  Port& P = ports_[port];
  Packet& p = pool_[id];
  const Time now = clock();
  p.port = -1;
  P.free_at = now + serialization(p.frame, P.bps);
  P.tx_bytes += p.frame + kWireOverhead;
  if (cfg_.cc == CongestionControl::kHpcc && p.type == PacketType::kData && !P.endpoint) {
    IntStack& s = pool_.telemetry(id);
    if (s.n < kMaxIntHops) s.hop[s.n++] = {P.bps, clock(), P.tx_bytes, P.c[p.queue].queue_bytes};
  }
  if (p.type == PacketType::kData) P.tx_payload += p.payload;
  if (capture_.captures(P.link)) {
    const bool starts = p.type == PacketType::kData && (p.opcode == Opcode::kFirst || p.opcode == Opcode::kOnly);
    capture_.write(p, clock(), starts ? nic_.message_bytes(p) : 0, topo_, cfg_.mtu);
  }
  p.link_epoch = P.epoch;
  // The frame reaches the peer after its last bit and the link's delay, or, cut through,
  // after its headers (a frame lost on the wire is lost here: a cut-through switch fails
  // its check at the end and does not forward it). A link that fails meanwhile changes
  // its epoch, and the arrival finds the frame lost (arrive).
  if (frame_lost(P.node, p)) {
    ++sh().counters.corrupted;
    pool_.release(sh().index, id);
  } else {
    const bool cut = P.cut_through && p.type != PacketType::kPause;
    p.port = P.peer;
    eng_.schedule((cut ? now + cut_through_time(P.bps) : P.free_at) + P.delay + wire_jitter(P), P.peer_node, kArrive,
             arrival(id, P.peer));
  }
  wake_at_end(port);
}

void Fabric::wake_at_end(int port) {
  Port& P = ports_[port];
  if (P.wake_pending || !(P.endpoint || P.holds_anything())) return;
  P.wake_pending = true;
  eng_.schedule(P.free_at, P.node, kTxDone, static_cast<std::uint32_t>(port));
}

bool Fabric::frame_lost(int node, const Packet& p) {
  if (cfg_.link_loss <= 0 && cfg_.link_ber <= 0) return false;
  const double bits = 8.0 * (p.frame + kWireOverhead);
  const double keep = (1 - cfg_.link_loss) * std::exp(bits * std::log1p(-cfg_.link_ber));
  return std::uniform_real_distribution<double>(0, 1)(eng_.rng(node).loss) >= keep;
}

Time Fabric::wire_jitter(const Port& P) {
  if (P.jitter_ps == 0) return 0;
  const Time most = P.jitter_ps != ~std::uint32_t{0} ? P.jitter_ps : P.jitter;
  return static_cast<Time>(eng_.rng(P.node).jitter() % static_cast<std::uint64_t>(most + 1));
}

void Fabric::tx_done(int port) {
  ports_[port].wake_pending = false;
  try_send(port);
}

void Fabric::arrive(std::uint32_t id) {
  Packet& p = pool_[id];
  const Port& P = ports_[p.port];
  if (!P.up || p.link_epoch != P.epoch) {
    ++sh().counters.lost_on_failure;
    pool_.release(sh().index, id);
    return;
  }
  if (p.type == PacketType::kPause) {
    receive_pfc(p.port, p);
    pool_.release(sh().index, id);
    return;
  }
  int node = P.node;
  if (node == p.dst) nic_.receive(id);
  else forward(node, id);
}

void Fabric::drop(std::uint32_t id) {
  ++sh().counters.drops;
  pool_.release(sh().index, id);
}

void Fabric::forward(int node, std::uint32_t id) {
  Packet& p = pool_[id];
  int out = choose_port(node, p);
  if (out < 0) {
    ++sh().counters.lost_on_failure;
    pool_.release(sh().index, id);
    return;
  }
  Port& O = ports_[out];
  const int q = p.queue, in = p.port;
  const std::int64_t wire = p.frame + kWireOverhead;
  const bool lossless = cfg_.pfc && q == cfg_.roce_queue && in >= 0;
  p.in_headroom = false;
  if (lossless) {
    // Into the shared buffer while this port is under xOFF and the buffer has room, else
    // into the port's headroom; past that the pause came too late and the packet is lost.
    const Port& I = ports_[in];
    const bool shared = I.c[q].ingress_bytes + wire <= xoff_threshold(node) && buffer_used_[node] + wire <= shared_size_[node];
    if (!shared && I.c[q].headroom_bytes + wire > I.headroom) {
      ++sh().counters.headroom_drops;
      ++O.drops;
      drop(id);
      return;
    }
    p.in_headroom = !shared;
  } else if (O.c[q].queue_bytes + wire > cfg_.drop_threshold || buffer_used_[node] + wire > shared_size_[node] ||
             (cfg_.trim && cfg_.trim_threshold > 0 && O.c[q].queue_bytes + wire > cfg_.trim_threshold && !p.trimmed)) {
    if (cfg_.trim && trim(p)) {
      ++O.trims;
      forward(node, id);  // the header alone, in its own queue (it is trimmed once)
      return;
    }
    ++O.drops;
    drop(id);
    return;
  }
  if (cfg_.ecn && p.ect && !p.ce) {
    // A VOQ switch marks on the depth of the packet's own virtual output queue.
    const VirtualOutputQueues* v = voq_in_use(out, q);
    std::int64_t depth = v ? v->bytes(voq_input(in)) : O.c[q].queue_bytes;
    bool mark = false;
    if (depth >= cfg_.wred_max) mark = true;
    else if (depth > cfg_.wred_min)
      mark = std::uniform_real_distribution<double>(0, 1)(eng_.rng(node).choice) <
             cfg_.wred_pmax * static_cast<double>(depth - cfg_.wred_min) / static_cast<double>(cfg_.wred_max - cfg_.wred_min);
    if (mark) {
      p.ce = true;
      ++O.ecn_marks;
      ++sh().counters.ecn_marks;
    }
  }
  enqueue(out, q, id);
  O.c[q].queue_bytes += wire;
  O.c[q].max_queue_bytes = std::max(O.c[q].max_queue_bytes, O.c[q].queue_bytes);
  if (p.in_headroom) {
    ports_[in].c[q].headroom_bytes += wire;
    headroom_used_[node] += wire;
  } else {
    buffer_used_[node] += wire;
    if (in >= 0) ports_[in].c[q].ingress_bytes += wire;
  }
  buffer_peak_[node] = std::max(buffer_peak_[node], buffer_used_[node] + headroom_used_[node]);
  if (lossless) {
    Port& I = ports_[in];
    if (!I.c[q].pausing && (p.in_headroom || I.c[q].ingress_bytes >= xoff_threshold(node))) send_pfc(in, q, true);
  }
  try_send(out);
}

void Fabric::enqueue(int port, int q, std::uint32_t id) {
  Port& P = ports_[static_cast<std::size_t>(port)];
  if (VirtualOutputQueues* v = voq_in_use(port, q)) {
    const Packet& p = pool_[id];
    v->push(voq_input(p.port), id, p.frame + kWireOverhead);
    P.set_holds(q, true);
    return;
  }
  P.enqueue(pool_, q, id);
}

int Fabric::voq_input(int in) const {
  if (in < 0) throw InternalError("simulator: a switch queued a packet that came in by no port");
  return port_slot_[static_cast<std::size_t>(in)];
}

VirtualOutputQueues* Fabric::voq_in_use(int port, int q) {
  VirtualOutputQueues* v = voq_of(port, q);
  if (v && v->inputs() == 0) v->resize(static_cast<int>(node_ports_[static_cast<std::size_t>(ports_[static_cast<std::size_t>(port)].node)].size()));
  return v;
}

std::uint32_t Fabric::queue_head(int port, int q) {
  if (const VirtualOutputQueues* v = voq_of(port, q)) return v->front();
  return ports_[static_cast<std::size_t>(port)].c[q].queue.front();
}

std::uint32_t Fabric::dequeue(int port, int q) {
  Port& P = ports_[static_cast<std::size_t>(port)];
  if (VirtualOutputQueues* v = voq_of(port, q)) {
    const std::uint32_t id = v->pop(pool_[v->front()].frame + kWireOverhead);
    if (v->empty()) P.set_holds(q, false);
    return id;
  }
  return P.dequeue(pool_, q);
}

bool Fabric::trim(Packet& p) {
  if (p.type != PacketType::kData || p.trimmed) return false;
  p.trimmed = true;
  p.payload = 0;
  p.frame = kHeaderBytes + (p.opcode == Opcode::kFirst || p.opcode == Opcode::kOnly ? kRethBytes : 0);  // its headers
  p.queue = static_cast<std::uint8_t>(cfg_.cnp_queue);
  p.ce = false;
  ++sh().counters.trimmed;
  return true;
}

void Fabric::dequeued_at_switch(int port, const Packet& p) {
  const std::int64_t wire = p.frame + kWireOverhead;
  const int node = ports_[port].node, q = p.queue;
  Port& I = ports_[p.port];
  if (p.in_headroom) {
    I.c[q].headroom_bytes -= wire;
    headroom_used_[node] -= wire;
  } else {
    buffer_used_[node] -= wire;
    I.c[q].ingress_bytes -= wire;
  }
  // Resume once well under xOFF, or once empty: the dynamic xOFF may be below the offset
  // while the buffer is full, and an empty port sees no more departures to check again.
  if (I.c[q].pausing && !I.c[q].storming && I.c[q].headroom_bytes == 0 &&
      (I.c[q].ingress_bytes == 0 || I.c[q].ingress_bytes + cfg_.pfc_xon_offset <= xoff_threshold(node)))
    send_pfc(p.port, q, false);
}

std::int64_t Fabric::xoff_threshold(int node) const {
  if (cfg_.pfc_xoff > 0) return cfg_.pfc_xoff;
  return static_cast<std::int64_t>(cfg_.pfc_alpha * static_cast<double>(shared_size_[node] - buffer_used_[node]));
}

namespace {

// A port's PFC headroom: what still arrives after its pause, one round trip of the link
// (both directions' propagation and switching) and 3 frames; pfc.headroom when given.
std::int64_t pfc_headroom(const SimConfig& c, double bps, Time round_trip) {
  if (c.pfc_headroom > 0) return c.pfc_headroom;
  return static_cast<std::int64_t>(bps * to_seconds(round_trip) / 8) +
         3 * static_cast<std::int64_t>(c.mtu + kHeaderBytes + kRethBytes + kWireOverhead);
}

// Each node's shared buffer: its buffer less its ports' PFC headroom on switches (with PFC),
// at least 64 chunks in scale mode. Throws ConfigError for a switch left without room for a
// few frames.
std::vector<std::int64_t> shared_buffer_sizes(const Topology& t, const SimConfig& c) {
  std::vector<std::int64_t> shared(t.nodes.size(), c.buffer_bytes);
  std::vector<int> ports(t.nodes.size(), 0);
  for (const Link& l : t.links) {
    const Time round_trip = 2 * l.delay + t.nodes[static_cast<std::size_t>(l.a)].latency + t.nodes[static_cast<std::size_t>(l.b)].latency;
    const std::int64_t headroom = pfc_headroom(c, l.bps, round_trip);
    for (const int n : {l.a, l.b}) {
      ++ports[static_cast<std::size_t>(n)];
      if (c.pfc && t.nodes[static_cast<std::size_t>(n)].kind == NodeKind::kSwitch) shared[static_cast<std::size_t>(n)] -= headroom;
    }
  }
  for (std::size_t n = 0; n < t.nodes.size(); ++n) {
    // Scale mode's chunks make headroom huge; it keeps 64 chunks of shared buffer.
    if (c.coarse > 0) shared[n] = std::max(shared[n], 64 * c.coarse);
    if (shared[n] < 4 * (c.mtu + kHeaderBytes + kRethBytes + kWireOverhead) && t.nodes[n].kind == NodeKind::kSwitch)
      throw ConfigError(fmt::format("switch {}: its buffer ({} bytes) does not cover the PFC headroom of its {} ports "
                                    "({} bytes) and a few frames: raise buffer or lower pfc.headroom",
                                    t.nodes[n].name, c.buffer_bytes, ports[n], c.buffer_bytes - shared[n]));
  }
  return shared;
}

}  // namespace

// Each port's PFC headroom is reserved out of its node's buffer; the rest is shared.
void Fabric::reserve_buffers() {
  buffer_used_.assign(topo_.nodes.size(), 0);
  headroom_used_.assign(topo_.nodes.size(), 0);
  buffer_peak_.assign(topo_.nodes.size(), 0);
  shared_size_ = shared_buffer_sizes(topo_, cfg_);
  for (Port& P : ports_) P.headroom = pfc_headroom(cfg_, P.bps, P.delay + ports_[static_cast<std::size_t>(P.peer)].delay);
}

void Fabric::send_pfc(int port, int queue, bool pause) {
  Port& P = ports_[port];
  bool transition = P.c[queue].pausing != pause;
  P.c[queue].pausing = pause;
  std::uint32_t id = pool_.alloc(sh().index);
  Packet& f = pool_[id];
  f.type = PacketType::kPause;
  f.queue = static_cast<std::uint8_t>(queue);
  f.psn = pause ? static_cast<std::uint32_t>(cfg_.pfc_quanta) : 0;
  f.frame = kPauseFrame;
  f.src = f.dst = P.node;
  P.push_control(id);
  if (pause) {
    ++P.pauses_sent;
    ++sh().counters.pauses;
    Time duration = static_cast<Time>(std::llround(cfg_.pfc_quanta * 512.0 * 1e12 / P.bps));
    eng_.schedule(clock() + std::max<Time>(duration / 2, 1), P.node, kPauseRefresh,
                     static_cast<std::uint64_t>(port) * 8 + static_cast<std::uint64_t>(queue));
  } else {
    ++P.resumes_sent;
    ++sh().counters.resumes;
  }
  if (transition) mine().pfc_events.push_back(PfcEvent{clock(), port, queue, pause});
  try_send(port);
}

void Fabric::receive_pfc(int port, const Packet& f) {
  // The frame arrived on `port`: the peer asks this side to stop (or resume) sending.
  Port& P = ports_[port];
  const int q = f.queue;
  const Time now = clock();
  auto end_pause = [&] {
    if (P.c[q].paused_since != kNever) P.c[q].paused_total += now - P.c[q].paused_since;
    P.c[q].paused_since = kNever;
    P.c[q].paused_until = now;
  };
  if (f.psn == 0) {
    end_pause();
    try_send(port);
    return;
  }
  ++P.pauses_received;
  if (now < P.c[q].watchdog_until) return;  // the watchdog ignores this queue's pauses for now
  if (P.c[q].paused_since == kNever) P.c[q].paused_since = now;
  if (cfg_.pfc_watchdog > 0 && now - P.c[q].paused_since >= cfg_.pfc_watchdog) {
    // A pause storm: the queue has not moved for the watchdog time. Break it.
    ++sh().counters.watchdog_storms;
    end_pause();
    P.c[q].watchdog_until = now + cfg_.pfc_watchdog;
    try_send(port);
    return;
  }
  P.c[q].paused_until = now + static_cast<Time>(std::llround(f.psn * 512.0 * 1e12 / P.bps));
  eng_.schedule(P.c[q].paused_until, P.node, kPauseExpire, static_cast<std::uint64_t>(port) * 8 + static_cast<std::uint64_t>(q));
}

void Fabric::pause_expired(int port, int queue) {
  Port& P = ports_[port];
  const Time now = clock();
  if (P.c[queue].paused_until != now || P.c[queue].paused_since == kNever) return;  // extended or resumed since
  P.c[queue].paused_total += now - P.c[queue].paused_since;
  P.c[queue].paused_since = kNever;
  try_send(port);
}

void Fabric::set_link(int link, bool up, double bps) {
  int pa = link_port_[link];
  for (int port : {pa, pa + 1}) {
    Port& P = ports_[port];
    if (bps > 0) P.bps = bps;
    if (P.up == up) continue;
    P.up = up;
    port_up_[static_cast<std::size_t>(port)] = up;
    ++route_generation_;
    if (up) continue;
    ++P.epoch;
    // Everything queued for this link is lost; release its buffer accounting.
    for (int q = 0; q < 8; ++q) {
      while (P.holds(q)) {
        std::uint32_t id = dequeue(port, q);
        Packet& p = pool_[id];
        P.c[q].queue_bytes -= p.frame + kWireOverhead;
        if (p.port >= 0) dequeued_at_switch(port, p);
        ++sh().counters.lost_on_failure;
        pool_.release(sh().index, id);
      }
      if (P.c[q].paused_since != kNever) P.c[q].paused_total += clock() - P.c[q].paused_since;
      P.c[q].paused_since = kNever;
      P.c[q].paused_until = 0;
    }
    while (P.holds(Port::kControlBit)) pool_.release(sh().index, P.pop_control());
  }
}

void Fabric::apply_failure(const Failure& f) {
  int a = topo_.find(f.a);
  std::vector<int> links;
  if (f.kind == Failure::Kind::kSwitchDown || f.kind == Failure::Kind::kSwitchUp) {
    for (int port : node_ports_[a]) links.push_back(ports_[port].link);
  } else {
    int b = topo_.find(f.b);
    for (std::size_t l = 0; l < topo_.links.size(); ++l) {
      const Link& L = topo_.links[l];
      if ((L.a == a && L.b == b) || (L.a == b && L.b == a)) links.push_back(static_cast<int>(l));
    }
  }
  if (f.kind == Failure::Kind::kPauseStorm) {
    for (int l : links) {
      int port = ports_[link_port_[l]].node == a ? link_port_[l] : link_port_[l] + 1;
      ports_[port].c[cfg_.roce_queue].storming = true;
      send_pfc(port, cfg_.roce_queue, true);
    }
    return;
  }
  bool up = f.kind == Failure::Kind::kLinkUp || f.kind == Failure::Kind::kSwitchUp || f.kind == Failure::Kind::kLinkDegrade;
  for (int l : links) set_link(l, up, f.kind == Failure::Kind::kLinkDegrade ? f.bps : 0);
  if (cfg_.routing_convergence > 0) eng_.schedule(clock() + cfg_.routing_convergence, -1, kReroute);
  else reroute();
}

void Fabric::reroute() {
  compute_routes();
  for (std::size_t port = 0; port < ports_.size(); ++port) try_send(static_cast<int>(port));
}

std::vector<int> Fabric::path(int src_gpu, int dst_gpu, const Packet* probe) const {
  int node = topo_.gpus[static_cast<std::size_t>(src_gpu)];
  const int dst = topo_.gpus[static_cast<std::size_t>(dst_gpu)];
  std::vector<int> ports;
  while (node != dst) {
    const Candidates next = routes_to(node, dst_gpu);
    if (next.n == 0 || ports.size() > topo_.nodes.size()) return {};
    ports.push_back(probe && next.n > 1 ? ecmp_pick(next.ports, next.n, hash_tuple(node, *probe)) : next.ports[0]);
    node = ports_[static_cast<std::size_t>(ports_[static_cast<std::size_t>(ports.back())].peer)].node;
  }
  return ports;
}

Time Fabric::ideal_fct(int src_gpu, int dst_gpu, std::int64_t bytes) const {
  const std::vector<int> hops = path(src_gpu, dst_gpu);
  if (hops.empty()) return 0;
  // The first packet is stored and forwarded at every hop (or cut through at its headers);
  // the others follow it back to back at the slowest link.
  const std::int64_t packets = packets_of(cfg_, bytes);
  const auto first = static_cast<std::uint32_t>(kHeaderBytes + kRethBytes + std::min<std::int64_t>(bytes, cfg_.mtu));
  const auto full = static_cast<std::uint32_t>(kHeaderBytes + cfg_.mtu);
  const auto last = static_cast<std::uint32_t>(kHeaderBytes + (bytes - cfg_.mtu * (packets - 1)));
  Time t = 0;
  double slowest = 0;
  for (int port : hops) {
    const Port& P = ports_[static_cast<std::size_t>(port)];
    t += (P.cut_through ? cut_through_time(P.bps) : serialization(first, P.bps)) + P.delay;
    slowest = slowest == 0 ? P.bps : std::min(slowest, P.bps);
  }
  if (packets > 1) t += (packets - 2) * serialization(full, slowest) + serialization(last, slowest);
  return t;
}

std::string Fabric::port_name(int port) const {
  return topo_.nodes[ports_[port].node].name + "->" + topo_.nodes[ports_[port].peer_node].name;
}

void Fabric::send(int node, std::uint32_t id) {
  Packet& p = pool_[id];
  const int out = choose_port(node, p);
  if (out < 0) {
    ++sh().counters.lost_on_failure;
    pool_.release(sh().index, id);
    return;
  }
  enqueue(out, p.queue, id);
  ports_[static_cast<std::size_t>(out)].c[p.queue].queue_bytes += p.frame + kWireOverhead;
  try_send(out);
}

void Fabric::wake_at(int port, Time at) {
  Port& P = ports_[static_cast<std::size_t>(port)];
  if (P.endpoint_wake_at <= at) return;
  P.endpoint_wake_at = at;
  P.endpoint_wake_pending = true;
  eng_.schedule(at, P.node, kEndpointWake, static_cast<std::uint64_t>(port));
}

std::vector<PfcEvent> Fabric::pfc_events() const {
  std::vector<PfcEvent> all;
  for (const PerThread& t : per_thread_) all.insert(all.end(), t.pfc_events.begin(), t.pfc_events.end());
  std::stable_sort(all.begin(), all.end(), [](const PfcEvent& a, const PfcEvent& b) {
    return a.at != b.at ? a.at < b.at : a.port != b.port ? a.port < b.port : a.queue < b.queue;
  });
  return all;
}

void Fabric::on_tx_done(void* f, std::uint64_t arg) { static_cast<Fabric*>(f)->tx_done(static_cast<int>(arg)); }
void Fabric::on_arrive(void* f, std::uint64_t arg) { static_cast<Fabric*>(f)->arrive(static_cast<std::uint32_t>(arg)); }
void Fabric::on_pause_expire(void* f, std::uint64_t arg) {
  static_cast<Fabric*>(f)->pause_expired(static_cast<int>(arg / 8), static_cast<int>(arg % 8));
}
void Fabric::on_pause_refresh(void* f, std::uint64_t arg) {
  Fabric& F = *static_cast<Fabric*>(f);
  const int port = static_cast<int>(arg / 8), q = static_cast<int>(arg % 8);
  if (F.ports_[static_cast<std::size_t>(port)].c[q].pausing && F.ports_[static_cast<std::size_t>(port)].up) F.send_pfc(port, q, true);
}
void Fabric::on_endpoint_wake(void* f, std::uint64_t arg) {
  Fabric& F = *static_cast<Fabric*>(f);
  Port& P = F.ports_[arg];
  if (P.endpoint_wake_at == clock()) {
    P.endpoint_wake_pending = false;
    P.endpoint_wake_at = kNever;
    F.try_send(static_cast<int>(arg));
  }
}
void Fabric::on_failure(void* f, std::uint64_t arg) {
  Fabric& F = *static_cast<Fabric*>(f);
  F.apply_failure(F.failures_[arg]);
}
void Fabric::on_reroute(void* f, std::uint64_t /*arg*/) { static_cast<Fabric*>(f)->reroute(); }

// A transmission's end reads its port; at a switch the packet at the head of its busiest
// class's queue, and where that came in; at a GPU the queue pair it will take its next
// packet from (the NIC's).
void Fabric::prefetch_tx_done(const void* f, std::uint64_t arg, int stage) {
  const Fabric& F = *static_cast<const Fabric*>(f);
  const Port& P = F.ports_[arg];
  if (stage == 0) {
    __builtin_prefetch(&P);
  } else if (const unsigned classes = P.backlog & 0xffu; !P.endpoint && classes != 0) {
    const Port::Class& c = P.c[31 - __builtin_clz(classes)];  // the first served of the strict ones
    if (c.queue.empty()) return;  // (its packets wait in virtual output queues)
    if (stage == 1) {
      __builtin_prefetch(&F.pool_.at(c.queue.front()));
      __builtin_prefetch(&F.eng_.rng(P.node));
    } else if (const Packet& head = F.pool_.at(c.queue.front()); head.port >= 0) {
      __builtin_prefetch(&F.ports_[static_cast<std::size_t>(head.port)].c[head.queue]);
    }
  } else if (P.endpoint) {
    if (stage == 1) {
      __builtin_prefetch(&P.c[F.cfg_.roce_queue]);
      __builtin_prefetch(&F.eng_.rng(P.node));
    }
    F.nic_.prefetch_next(P.node, stage);
  }
}

// A frame's arrival reads the packet and the port it comes in by (both in its event's
// argument); then, at a switch, its routes toward the packet's destination, and the port
// that ECMP picks from them; at its destination, its queue pair (the NIC's).
void Fabric::prefetch_arrive(const void* f, std::uint64_t arg, int stage) {
  const Fabric& F = *static_cast<const Fabric*>(f);
  const Packet& p = F.pool_.at(static_cast<std::uint32_t>(arg));
  const Port& in = F.ports_[arg >> 32];
  if (stage == 0) {
    __builtin_prefetch(&p);
    __builtin_prefetch(&in);
    return;
  }
  if (p.type == PacketType::kPause) return;
  if (in.node == p.dst) {
    if (stage == 1) F.nic_.prefetch_receive(p.qp);
    return;
  }
  const std::int32_t row = F.route_row_[static_cast<std::size_t>(in.node)];
  const int d = F.gpu_rank_of_node_[static_cast<std::size_t>(p.dst)];
  if (row < 0 || d < 0) return;
  if (stage == 1) {
    __builtin_prefetch(&F.route_slot(row, d));
    __builtin_prefetch(&in.c[p.queue]);
    __builtin_prefetch(&F.eng_.rng(in.node));
    return;
  }
  // The port forward() will take when ECMP (unweighted) or the only route decides it.
  const Candidates next = F.routes_to(in.node, d);
  if (next.n == 0 || (next.n > 1 && (!F.ecmp_decides(p.type) || F.cfg_.ecmp_weighted))) return;
  const int out = next.n == 1 ? next.ports[0] : F.ecmp_pick(next.ports, next.n, F.hash_tuple(in.node, p));
  __builtin_prefetch(&F.ports_[static_cast<std::size_t>(out)]);
  __builtin_prefetch(&F.ports_[static_cast<std::size_t>(out)].c[p.queue]);
}

Fabric::MemoryEstimate Fabric::estimate_memory(const Topology& t, const Workload& w, const RouteColumns& columns) {
  // Tables for the nodes with several links (compute_routes): a slot per destination.
  const int destinations = columns.count();
  const double slots = static_cast<double>(columns.routed_nodes) * destinations;
  const double routes = slots * (sizeof(RouteSlot) + sizeof(std::int32_t));
  double steps = 0;
  for (const Agent& a : w.agents) steps += static_cast<double>(a.steps.size());
  return {routes, routes + 2.0 * static_cast<double>(t.links.size()) * sizeof(Port) + steps * 100, destinations,
          columns.routed_nodes};
}

void Fabric::check_setup(const Topology& t, const SimConfig& c, const Workload& w, const RouteColumns& columns) {
  const MemoryEstimate need = estimate_memory(t, w, columns);
  if (const auto have = available_memory_bytes(); have && need.total > 0.9 * static_cast<double>(*have)) {
    throw ConfigError(fmt::format("this simulation needs about {:.1f} GiB (routing tables for {} nodes x {} destinations: {:.1f} GiB), "
                                  "more than the {:.1f} GiB this machine has available: simulate a smaller fabric",
                                  need.total / 1073741824.0, need.routed_nodes, need.destinations,
                                  need.routes / 1073741824.0, static_cast<double>(*have) / 1073741824.0));
  }
  shared_buffer_sizes(t, c);
  if (c.mode == SimMode::kFlow) {
    if (!w.failures.empty()) throw ConfigError("mode=flow does not model failures: simulate them with mode=packet");
    if (c.lb != LoadBalancing::kEcmp)
      throw ConfigError("mode=flow follows each message's ECMP path: lb=flowlet, spray and adaptive are modeled with mode=packet");
  }
}


}  // namespace weft::sim
