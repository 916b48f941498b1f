// Ports, switches and links of the simulated fabric: transmission, routing and load
// balancing, shared buffers, WRED/ECN marking, PFC, failures.
#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>
#include <unordered_map>

#include "weft/sim/network.h"
#include "weft/sim/pxn.h"
#include "weft/util/error.h"
#include "weft/util/machine.h"

namespace weft::sim {
namespace {

constexpr std::uint32_t kNone = ~0u;

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

void Network::build_ports() {
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

Network::Candidates Network::routes_to(int node, int dst_gpu) const {
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

void Network::compute_routes() {
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

std::uint32_t Network::hash_tuple(int node, const Packet& p) const {
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

int Network::choose_port(int node, Packet& p) {
  const int port = pick_port(node, p);
  return port >= 0 && ports_[port].up ? port : -1;  // a failed link the routes still use: none
}

int Network::pick_port(int node, Packet& p) {
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
        case SprayMode::kRandom: return c[rng_[static_cast<std::size_t>(node)].choice() % static_cast<std::uint64_t>(n)];
        case SprayMode::kRoundRobin: return c[rr_counter_[node]++ % static_cast<std::uint32_t>(n)];
        case SprayMode::kLeastLoaded: return least_loaded();
      }
    }
    if (cfg_.lb == LoadBalancing::kAdaptive && cfg_.ar_granularity == ArGranularity::kPacket) return adaptive_pick(node, p, c, n);
    if (cfg_.lb == LoadBalancing::kFlowlet || cfg_.lb == LoadBalancing::kAdaptive) {
      std::uint64_t key = static_cast<std::uint64_t>(node) << 32 | p.qp;
      auto& entry = sh().flowlets[key];
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

std::int64_t Network::signalled_queue(int port, int queue) {
  Port& P = ports_[static_cast<std::size_t>(port)];
  const Time now = clock();
  if (!P.c[queue].signalled || now - P.c[queue].signalled_at >= cfg_.ar_signal_interval) {
    P.c[queue].signalled = true;
    P.c[queue].signalled_at = now;
    P.c[queue].signalled_bytes = P.c[queue].queue_bytes;
  }
  return P.c[queue].signalled_bytes;
}

int Network::adaptive_pick(int node, const Packet& p, const std::int32_t* c, int n) {
  // Ties (an idle fabric) fall at random, as a switch's arbiter breaks them: no two
  // switches drift into the same order.
  const auto start = static_cast<std::uint32_t>(rng_[static_cast<std::size_t>(node)].choice() % static_cast<std::uint64_t>(n));
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

int Network::ecmp_pick(const std::int32_t* c, int n, std::uint32_t h) const {
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

void Network::try_send(int port) {
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
      if (id == kNone && P.endpoint) id = endpoint_pull(P.node, port);
    }
    if (id != kNone && pool_[id].type != PacketType::kPause && pool_[id].port != -2) {
      // Left a queue (endpoint_pull marks its fresh packets with port -2).
      Packet& p = pool_[id];
      std::int64_t wire = p.frame + kWireOverhead;
      P.c[p.queue].queue_bytes -= wire;
      if (p.port >= 0) dequeued_at_switch(port, p);
    }
  }
  if (id == kNone) return;
  transmit(port, id);
}

void Network::transmit(int port, std::uint32_t id) {
  Port& P = ports_[port];
  Packet& p = pool_[id];
  const Time now = clock();
  p.port = -1;
  P.free_at = now + serialization(p.frame, P.bps);
  P.tx_bytes += p.frame + kWireOverhead;
  if (cfg_.cc == CongestionControl::kHpcc && p.type == PacketType::kData && !P.endpoint) {
    IntStack& s = int_of(id);
    if (s.n < kMaxIntHops) s.hop[s.n++] = {P.bps, clock(), P.tx_bytes, P.c[p.queue].queue_bytes};
  }
  if (p.type == PacketType::kData) P.tx_payload += p.payload;
  if (capture_.captures(P.link)) {
    const bool starts = p.type == PacketType::kData && (p.opcode == Opcode::kFirst || p.opcode == Opcode::kOnly);
    capture_.write(p, clock(), starts ? message_bytes(p) : 0, topo_, cfg_.mtu);
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
    schedule((cut ? now + cut_through_time(P.bps) : P.free_at) + P.delay + wire_jitter(P), P.peer_node, kArrive,
             arrival(id, P.peer));
  }
  wake_at_end(port);
}

void Network::wake_at_end(int port) {
  Port& P = ports_[port];
  if (P.wake_pending || !(P.endpoint || P.holds_anything())) return;
  P.wake_pending = true;
  schedule(P.free_at, P.node, kTxDone, static_cast<std::uint32_t>(port));
}

bool Network::frame_lost(int node, const Packet& p) {
  if (cfg_.link_loss <= 0 && cfg_.link_ber <= 0) return false;
  const double bits = 8.0 * (p.frame + kWireOverhead);
  const double keep = (1 - cfg_.link_loss) * std::exp(bits * std::log1p(-cfg_.link_ber));
  return std::uniform_real_distribution<double>(0, 1)(rng_[static_cast<std::size_t>(node)].loss) >= keep;
}

Time Network::wire_jitter(const Port& P) {
  if (P.jitter_ps == 0) return 0;
  const Time most = P.jitter_ps != ~std::uint32_t{0} ? P.jitter_ps : P.jitter;
  return static_cast<Time>(rng_[static_cast<std::size_t>(P.node)].jitter() % static_cast<std::uint64_t>(most + 1));
}

void Network::tx_done(int port) {
  ports_[port].wake_pending = false;
  try_send(port);
}

void Network::arrive(std::uint32_t id) {
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
  if (node == p.dst) endpoint_receive(id);
  else forward(node, id);
}

void Network::drop(std::uint32_t id) {
  ++sh().counters.drops;
  pool_.release(sh().index, id);
}

void Network::forward(int node, std::uint32_t id) {
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
      mark = std::uniform_real_distribution<double>(0, 1)(rng_[static_cast<std::size_t>(node)].choice) <
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

void Network::enqueue(int port, int q, std::uint32_t id) {
  Port& P = ports_[static_cast<std::size_t>(port)];
  if (VirtualOutputQueues* v = voq_in_use(port, q)) {
    const Packet& p = pool_[id];
    v->push(voq_input(p.port), id, p.frame + kWireOverhead);
    P.set_holds(q, true);
    return;
  }
  P.enqueue(pool_, q, id);
}

int Network::voq_input(int in) const {
  if (in < 0) throw InternalError("simulator: a switch queued a packet that came in by no port");
  return port_slot_[static_cast<std::size_t>(in)];
}

VirtualOutputQueues* Network::voq_in_use(int port, int q) {
  VirtualOutputQueues* v = voq_of(port, q);
  if (v && v->inputs() == 0) v->resize(static_cast<int>(node_ports_[static_cast<std::size_t>(ports_[static_cast<std::size_t>(port)].node)].size()));
  return v;
}

std::uint32_t Network::queue_head(int port, int q) {
  if (const VirtualOutputQueues* v = voq_of(port, q)) return v->front();
  return ports_[static_cast<std::size_t>(port)].c[q].queue.front();
}

std::uint32_t Network::dequeue(int port, int q) {
  Port& P = ports_[static_cast<std::size_t>(port)];
  if (VirtualOutputQueues* v = voq_of(port, q)) {
    const std::uint32_t id = v->pop(pool_[v->front()].frame + kWireOverhead);
    if (v->empty()) P.set_holds(q, false);
    return id;
  }
  return P.dequeue(pool_, q);
}

bool Network::trim(Packet& p) {
  if (p.type != PacketType::kData || p.trimmed) return false;
  p.trimmed = true;
  p.payload = 0;
  p.frame = kHeaderBytes + (p.opcode == Opcode::kFirst || p.opcode == Opcode::kOnly ? kRethBytes : 0);  // its headers
  p.queue = static_cast<std::uint8_t>(cfg_.cnp_queue);
  p.ce = false;
  ++sh().counters.trimmed;
  return true;
}

void Network::dequeued_at_switch(int port, const Packet& p) {
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

std::int64_t Network::xoff_threshold(int node) const {
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
void Network::reserve_buffers() {
  buffer_used_.assign(topo_.nodes.size(), 0);
  headroom_used_.assign(topo_.nodes.size(), 0);
  buffer_peak_.assign(topo_.nodes.size(), 0);
  shared_size_ = shared_buffer_sizes(topo_, cfg_);
  for (Port& P : ports_) P.headroom = pfc_headroom(cfg_, P.bps, P.delay + ports_[static_cast<std::size_t>(P.peer)].delay);
}

void Network::send_pfc(int port, int queue, bool pause) {
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
    schedule(clock() + std::max<Time>(duration / 2, 1), P.node, kPauseRefresh,
                     static_cast<std::uint64_t>(port) * 8 + static_cast<std::uint64_t>(queue));
  } else {
    ++P.resumes_sent;
    ++sh().counters.resumes;
  }
  if (transition) sh().pfc_events.push_back(PfcEvent{clock(), port, queue, pause});
  try_send(port);
}

void Network::receive_pfc(int port, const Packet& f) {
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
  schedule(P.c[q].paused_until, P.node, kPauseExpire, static_cast<std::uint64_t>(port) * 8 + static_cast<std::uint64_t>(q));
}

void Network::pause_expired(int port, int queue) {
  Port& P = ports_[port];
  const Time now = clock();
  if (P.c[queue].paused_until != now || P.c[queue].paused_since == kNever) return;  // extended or resumed since
  P.c[queue].paused_total += now - P.c[queue].paused_since;
  P.c[queue].paused_since = kNever;
  try_send(port);
}

void Network::set_link(int link, bool up, double bps) {
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

void Network::apply_failure(const Failure& f) {
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
  if (cfg_.routing_convergence > 0) schedule(clock() + cfg_.routing_convergence, -1, kReroute);
  else reroute();
}

void Network::reroute() {
  compute_routes();
  for (std::size_t port = 0; port < ports_.size(); ++port) try_send(static_cast<int>(port));
}

void Network::sample_queues() {
  Counters now_counters;
  for (Shard* s : all_shards()) now_counters += s->counters;
  samplers_.sample(clock(), now_counters, ports_, qps_, cfg_);
}

std::vector<int> Network::path(int src_gpu, int dst_gpu, const Packet* probe) const {
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

std::vector<int> Network::qp_path(int qp) const {
  const QueuePair& q = qps_[static_cast<std::size_t>(qp)];
  Packet probe;
  probe.src = q.src;
  probe.dst = q.dst;
  probe.sport = q.sport;
  return path(gpu_rank_of_node_[static_cast<std::size_t>(q.src)], gpu_rank_of_node_[static_cast<std::size_t>(q.dst)], &probe);
}

Time Network::ideal_fct(int src_gpu, int dst_gpu, std::int64_t bytes) const {
  const std::vector<int> hops = path(src_gpu, dst_gpu);
  if (hops.empty()) return 0;
  // The first packet is stored and forwarded at every hop (or cut through at its headers);
  // the others follow it back to back at the slowest link.
  const std::int64_t packets = packets_of(bytes);
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

std::string Network::port_name(int port) const {
  return topo_.nodes[ports_[port].node].name + "->" + topo_.nodes[ports_[port].peer_node].name;
}

void Network::on_event(std::uint32_t kind, std::uint64_t arg) {
  switch (kind) {
    case kTxDone: tx_done(static_cast<int>(arg)); break;
    case kArrive: arrive(static_cast<std::uint32_t>(arg)); break;
    case kPauseExpire: pause_expired(static_cast<int>(arg / 8), static_cast<int>(arg % 8)); break;
    case kPauseRefresh: {
      int port = static_cast<int>(arg / 8), q = static_cast<int>(arg % 8);
      if (ports_[port].c[q].pausing && ports_[port].up) send_pfc(port, q, true);
      break;
    }
    case kEndpointWake: {
      Port& P = ports_[arg];
      if (P.endpoint_wake_at == clock()) {
        P.endpoint_wake_pending = false;
        P.endpoint_wake_at = kNever;
        try_send(static_cast<int>(arg));
      }
      break;
    }
    case kRto: rto_check(static_cast<int>(arg)); break;
    case kAlphaTimer: alpha_timer(static_cast<int>(arg)); break;
    case kRateTimer: rate_timer(static_cast<int>(arg >> 32), static_cast<std::uint32_t>(arg)); break;
    case kStepStart: agents_.step_start(static_cast<int>(arg)); break;
    case kSample:
      sample_queues();
      if (agents_left_ > 0) schedule(clock() + cfg_.sample_interval, -1, kSample);
      break;
    case kFailure: apply_failure(work_.failures[arg]); break;
    case kReroute: reroute(); break;
    case kFluidUpdate: flow_.update(static_cast<std::uint32_t>(arg)); break;
    case kFluidDelivered: flow_.delivered(static_cast<int>(arg)); break;
    case kFluidAcked: agents_.message_acked(static_cast<int>(arg)); break;
    case kMessageReady: agents_.message_ready(static_cast<int>(arg)); break;
    default: throw InternalError("simulator: unknown event kind");
  }
}

// A frame's arrival reads the packet and the port it comes in by (both in its event's
// argument); then, at a switch, its routes toward the packet's destination, and the port
// that ECMP picks from them; at its destination, its queue pair. A transmission's end
// reads its port; at a switch the packet at the head of its busiest class's queue, and
// where that came in; at a GPU the queue pair it will take its next packet from.
void Network::prefetch(std::uint32_t kind, std::uint64_t arg, int stage) const {
  if (kind == kTxDone) {
    const Port& P = ports_[arg];
    if (stage == 0) {
      __builtin_prefetch(&P);
    } else if (const unsigned classes = P.backlog & 0xffu; !P.endpoint && classes != 0) {
      const Port::Class& c = P.c[31 - __builtin_clz(classes)];  // the first served of the strict ones
      if (c.queue.empty()) return;  // (its packets wait in virtual output queues)
      if (stage == 1) {
        __builtin_prefetch(&pool_.at(c.queue.front()));
        __builtin_prefetch(&rng_[static_cast<std::size_t>(P.node)]);
      } else if (const Packet& head = pool_.at(c.queue.front()); head.port >= 0) {
        __builtin_prefetch(&ports_[static_cast<std::size_t>(head.port)].c[head.queue]);
      }
    } else if (P.endpoint) {
      const std::vector<int>& list = active_qps_[static_cast<std::size_t>(P.node)];
      if (list.empty()) return;
      const std::size_t next = rr_qp_[static_cast<std::size_t>(P.node)] % list.size();
      if (stage == 1) {
        __builtin_prefetch(&list[next]);
        __builtin_prefetch(&P.c[cfg_.roce_queue]);
        __builtin_prefetch(&rng_[static_cast<std::size_t>(P.node)]);
      } else {
        const QueuePair& q = qps_[static_cast<std::size_t>(list[next])];
        __builtin_prefetch(&q);
        __builtin_prefetch(&q.snd_nxt);
        __builtin_prefetch(&q.next_send);
        __builtin_prefetch(&q.rate);
      }
    }
    return;
  }
  if (kind != kArrive) return;
  const Packet& p = pool_.at(static_cast<std::uint32_t>(arg));
  const Port& in = ports_[arg >> 32];
  if (stage == 0) {
    __builtin_prefetch(&p);
    __builtin_prefetch(&in);
    return;
  }
  if (p.type == PacketType::kPause) return;
  if (in.node == p.dst) {
    if (stage == 1 && p.qp < qps_.size()) {
      __builtin_prefetch(&qps_[p.qp].epsn);
      __builtin_prefetch(&qps_[p.qp].snd_una);
    }
    return;
  }
  const std::int32_t row = route_row_[static_cast<std::size_t>(in.node)];
  const int d = gpu_rank_of_node_[static_cast<std::size_t>(p.dst)];
  if (row < 0 || d < 0) return;
  if (stage == 1) {
    __builtin_prefetch(&route_slot(row, d));
    __builtin_prefetch(&in.c[p.queue]);
    __builtin_prefetch(&rng_[static_cast<std::size_t>(in.node)]);
    return;
  }
  // The port forward() will take when ECMP (unweighted) or the only route decides it.
  const Candidates next = routes_to(in.node, d);
  if (next.n == 0 || (next.n > 1 && (!ecmp_decides(p.type) || cfg_.ecmp_weighted))) return;
  const int out = next.n == 1 ? next.ports[0] : ecmp_pick(next.ports, next.n, hash_tuple(in.node, p));
  __builtin_prefetch(&ports_[static_cast<std::size_t>(out)]);
  __builtin_prefetch(&ports_[static_cast<std::size_t>(out)].c[p.queue]);
}

Network::MemoryEstimate Network::estimate_memory(const Topology& t, const Workload& w, const RouteColumns& columns) {
  // Tables for the nodes with several links (compute_routes): a slot per destination.
  const int destinations = columns.count();
  const double slots = static_cast<double>(columns.routed_nodes) * destinations;
  const double routes = slots * (sizeof(RouteSlot) + sizeof(std::int32_t));
  double steps = 0;
  for (const Agent& a : w.agents) steps += static_cast<double>(a.steps.size());
  return {routes, routes + 2.0 * static_cast<double>(t.links.size()) * sizeof(Port) + steps * 100, destinations,
          columns.routed_nodes};
}

void Network::check_setup(const Topology& t, const SimConfig& c, const Workload& w) {
  check_setup(t, c, w, RouteColumns::of(t));
}

void Network::check_setup(const Topology& t, const SimConfig& c, const Workload& w, const RouteColumns& columns) {
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

Network::Network(const Topology& topology, const SimConfig& config, Workload workload)
    : topo_(topology), cfg_(config), work_(std::move(workload)), columns_(RouteColumns::of(topo_)),
      agents_(*this, topo_, cfg_, work_), flow_(*this, topo_, cfg_) {
  current_ = &coord_;
  if (cfg_.pxn) pxn_relays_ = route_through_nvlink_peers(work_, topo_);
  finalize_config(cfg_);
  check_setup(topo_, cfg_, work_, columns_);
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
  // Each node's streams, seeded from the run's seed and the node's number.
  rng_.resize(topo_.nodes.size());
  for (std::size_t n = 0; n < topo_.nodes.size(); ++n) {
    rng_[n].choice.state = splitmix(cfg_.seed ^ splitmix(3 * n + 1));
    rng_[n].jitter.state = splitmix(cfg_.seed ^ 0x6A09E667F3BCC908ull ^ splitmix(3 * n + 2));
    rng_[n].loss.state = splitmix(cfg_.seed ^ 0xBB67AE8584CAA73Bull ^ splitmix(3 * n + 3));
  }
  // Nodes joined by a link without delay (an NVSwitch to its GPUs) run together; between
  // the others no node reaches another sooner than the smallest delay of their links: the
  // window (at most 1 us, so that a run ends soon after its last rank).
  atom_.resize(topo_.nodes.size());
  for (std::size_t n = 0; n < atom_.size(); ++n) atom_[n] = static_cast<int>(n);
  auto root = [&](int n) {
    while (atom_[static_cast<std::size_t>(n)] != n) n = atom_[static_cast<std::size_t>(n)] = atom_[static_cast<std::size_t>(atom_[static_cast<std::size_t>(n)])];
    return n;
  };
  for (const Port& P : ports_)
    if (P.delay == 0) {
      const int a = root(P.node), b = root(ports_[static_cast<std::size_t>(P.peer)].node);
      if (a != b) atom_[static_cast<std::size_t>(std::max(a, b))] = std::min(a, b);
    }
  for (std::size_t n = 0; n < atom_.size(); ++n) atom_[n] = root(static_cast<int>(n));
  window_ = kUs;
  for (const Port& P : ports_)
    if (atom_[static_cast<std::size_t>(P.node)] != atom_[static_cast<std::size_t>(ports_[static_cast<std::size_t>(P.peer)].node)])
      window_ = std::min(window_, P.delay);
  seq_.assign(topo_.nodes.size() + 1, 0);
  active_qps_.assign(topo_.nodes.size(), {});
  rr_qp_.assign(topo_.nodes.size(), 0);
  qps_created_.assign(topo_.nodes.size(), 0);
  for (std::size_t i = 0; i < work_.failures.size(); ++i) {
    const Failure& f = work_.failures[i];
    if (topo_.find(f.a) < 0) throw ConfigError("failure: unknown node '" + f.a + "'");
    if (!f.b.empty() && topo_.find(f.b) < 0) throw ConfigError("failure: unknown node '" + f.b + "'");
  }
  if (cfg_.mode == SimMode::kFlow) {
    flow_.prepare();
  }
  collective_times_.assign(work_.collectives.size(), {kNever, 0});
  agents_.prepare();
  agents_left_ = agents_.started();
}

void Network::share_nodes(int threads) {
  node_shard_.assign(topo_.nodes.size(), 0);
  if (threads <= 1) return;
  // GPUs in rank order cut into equal runs; then, breadth first from the GPUs, each other
  // node joins the least loaded (by ports) of the shards of its neighbours met before it.
  // A fat tree's pods stay whole and its core switches are dealt out.
  std::vector<std::int64_t> load(static_cast<std::size_t>(threads), 0);
  std::vector<int> level(topo_.nodes.size(), -1);
  std::vector<int> frontier;
  const std::size_t G = topo_.gpus.size();
  for (std::size_t r = 0; r < G; ++r) {
    const int n = topo_.gpus[r];
    const int s = static_cast<int>(r * static_cast<std::size_t>(threads) / G);
    node_shard_[static_cast<std::size_t>(n)] = s;
    level[static_cast<std::size_t>(n)] = 0;
    load[static_cast<std::size_t>(s)] += static_cast<std::int64_t>(node_ports_[static_cast<std::size_t>(n)].size());
    frontier.push_back(n);
  }
  for (int depth = 1; !frontier.empty(); ++depth) {
    std::vector<int> next;
    for (int n : frontier)
      for (int port : node_ports_[static_cast<std::size_t>(n)]) {
        const int m = ports_[static_cast<std::size_t>(ports_[static_cast<std::size_t>(port)].peer)].node;
        if (level[static_cast<std::size_t>(m)] >= 0) continue;
        level[static_cast<std::size_t>(m)] = depth;
        next.push_back(m);
      }
    for (int m : next) {
      int best = -1;
      for (int port : node_ports_[static_cast<std::size_t>(m)]) {
        const int k = ports_[static_cast<std::size_t>(ports_[static_cast<std::size_t>(port)].peer)].node;
        if (level[static_cast<std::size_t>(k)] < 0 || level[static_cast<std::size_t>(k)] >= depth) continue;
        const int s = node_shard_[static_cast<std::size_t>(k)];
        if (best < 0 || load[static_cast<std::size_t>(s)] < load[static_cast<std::size_t>(best)]) best = s;
      }
      node_shard_[static_cast<std::size_t>(m)] = best < 0 ? 0 : best;
      load[static_cast<std::size_t>(node_shard_[static_cast<std::size_t>(m)])] +=
          static_cast<std::int64_t>(node_ports_[static_cast<std::size_t>(m)].size());
    }
    frontier = std::move(next);
  }
  // Nodes joined without delay go where the first of them went.
  for (std::size_t n = 0; n < atom_.size(); ++n) node_shard_[n] = node_shard_[static_cast<std::size_t>(atom_[n])];
}

void Network::begin_run() {
  int threads = cfg_.threads > 0 ? cfg_.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (threads > 1) {
    // What reads or changes another node's state at once runs on one thread.
    if (cfg_.mode == SimMode::kFlow) single_thread_reason_ = "the flow-level mode sets every flow's rate at once";
    else if (cfg_.lb == LoadBalancing::kAdaptive && cfg_.ar_remote) single_thread_reason_ = "ar.remote reads the next switch's queues at once";
    else if (capture_.active()) single_thread_reason_ = "a pcap capture reads the senders' queue pairs";
    if (!single_thread_reason_.empty()) threads = 1;
  }
  threads = std::min<int>(threads, static_cast<int>(topo_.nodes.size()));
  share_nodes(threads);
  pool_.reset(threads + 1, cfg_.cc == CongestionControl::kHpcc);
  shards_.clear();
  for (int i = 0; i < threads; ++i) {
    shards_.push_back(std::make_unique<Shard>());
    shards_.back()->index = i;
  }
  coord_.index = threads;
  for (Shard* s : all_shards()) {
    s->outbox.assign(static_cast<std::size_t>(threads), {});
    s->collective_times.assign(work_.collectives.size(), {kNever, 0});
  }
  current_ = &coord_;
  for (std::size_t i = 0; i < work_.failures.size(); ++i) schedule(work_.failures[i].at, -1, kFailure, i);
  agents_.schedule_starts();
  if (cfg_.sample_interval > 0) schedule(cfg_.sample_interval, -1, kSample);
}

void Network::capture(const std::string& node_a, const std::string& node_b, const std::string& pcap_path) {
  capture_.open(pcap_path, topo_.link_between(node_a, node_b, "pcap"));
}

Network::~Network() = default;

}  // namespace weft::sim
