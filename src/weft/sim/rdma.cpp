// RoCEv2 reliable-connection queue pairs at the GPU endpoints: messages cut into MTU
// packets with PSNs, WRITE First/Middle/Last or Only, coalesced ACKs, NAKs on sequence
// errors, go-back-N or selective retransmission with a timeout, CNPs from the receiver
// (notification point) and the DCQCN reaction point at the sender.
#include "weft/sim/nic.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "weft/sim/agents.h"
#include "weft/sim/fabric.h"
#include "weft/util/error.h"

namespace weft::sim {

Nic::Nic(Engine& engine, PacketPool& pool, Fabric& fabric, Agents& agents, const Topology& topo, const SimConfig& cfg,
         const Workload& work)
    : eng_(engine), pool_(pool), fabric_(fabric), agents_(agents), topo_(topo), cfg_(cfg), work_(work) {
  kRto = eng_.add_kind(this, on_rto);
  kAlphaTimer = eng_.add_kind(this, on_alpha_timer);
  kRateTimer = eng_.add_kind(this, on_rate_timer);
}

void Nic::prepare() {
  active_qps_.assign(topo_.nodes.size(), {});
  rr_qp_.assign(topo_.nodes.size(), 0);
  qps_created_.assign(topo_.nodes.size(), 0);
}

void Nic::begin(int shards) {
  echo_.assign(static_cast<std::size_t>(shards), {});
  running_ = true;
}

void Nic::on_rto(void* n, std::uint64_t arg) { static_cast<Nic*>(n)->rto_check(static_cast<int>(arg)); }
void Nic::on_alpha_timer(void* n, std::uint64_t arg) { static_cast<Nic*>(n)->alpha_timer(static_cast<int>(arg)); }
void Nic::on_rate_timer(void* n, std::uint64_t arg) {
  static_cast<Nic*>(n)->rate_timer(static_cast<int>(arg >> 32), static_cast<std::uint32_t>(arg));
}

void Nic::prefetch_next(int node, int stage) const {
  const std::vector<int>& list = active_qps_[static_cast<std::size_t>(node)];
  if (list.empty()) return;
  const std::size_t next = rr_qp_[static_cast<std::size_t>(node)] % list.size();
  if (stage == 1) {
    __builtin_prefetch(&list[next]);
  } else if (stage > 1) {
    const QueuePair& q = qps_[static_cast<std::size_t>(list[next])];
    __builtin_prefetch(&q);
    __builtin_prefetch(&q.snd_nxt);
    __builtin_prefetch(&q.next_send);
    __builtin_prefetch(&q.rate);
  }
}

void Nic::prefetch_receive(std::uint32_t qp) const {
  if (qp >= qps_.size()) return;
  __builtin_prefetch(&qps_[qp].epsn);
  __builtin_prefetch(&qps_[qp].snd_una);
}

std::vector<int> Nic::path_of(int qp) const {
  const QueuePair& q = qps_[static_cast<std::size_t>(qp)];
  Packet probe;
  probe.src = q.src;
  probe.dst = q.dst;
  probe.sport = q.sport;
  return fabric_.path(fabric_.gpu_rank_of(q.src), fabric_.gpu_rank_of(q.dst), &probe);
}

double Nic::line_rate(int node) const {
  if (fabric_.gpu_rank_of(node) >= topo_.gpu_count()) {
    // A switch's reducer sends each flow at the rate of the switch's ports (multicast
    // replication), not at its own link's sum of them.
    double port = 0;
    for (int mine : fabric_.node_ports(node)) {
      const int sw = fabric_.ports()[mine].peer_node;
      for (int q : fabric_.node_ports(sw))
        if (topo_.links[fabric_.ports()[q].link].tier != "reducer") port = std::max(port, fabric_.ports()[q].bps);
    }
    return port;
  }
  double best = 0, any = 0;
  for (int port : fabric_.node_ports(node)) {
    any = std::max(any, fabric_.ports()[port].bps);
    if (topo_.links[fabric_.ports()[port].link].tier != "nvlink") best = std::max(best, fabric_.ports()[port].bps);
  }
  return best > 0 ? best : any;
}

int Nic::qp_for(int src_agent, int dst_agent, int part) {
  std::uint64_t key = (static_cast<std::uint64_t>(src_agent) << 32 | static_cast<std::uint32_t>(dst_agent)) * 257 +
                      static_cast<std::uint64_t>(part);
  if (running_) {  // every QP was made before the run (expect): only looked up, from any thread
    const auto found = qp_index_.find(key);
    if (found == qp_index_.end()) throw InternalError("simulator: a send without its queue pair");
    return found->second;
  }
  auto [it, fresh] = qp_index_.try_emplace(key, static_cast<int>(qps_.size()));
  if (fresh) {
    QueuePair q;
    q.src_agent = src_agent;
    q.dst_agent = dst_agent;
    q.src = topo_.gpus[work_.agents[src_agent].gpu];
    q.dst = topo_.gpus[work_.agents[dst_agent].gpu];
    // RoCEv2 puts QP entropy in the UDP source port; like a NIC numbering its QPs in
    // creation order, the n-th QP of every GPU gets the same port.
    int local = qps_created_[q.src]++;
    q.sport = static_cast<std::uint16_t>(0xC000 | (local & 0x3FFF));
    int queue = work_.agents[src_agent].queue;
    q.queue = static_cast<std::uint8_t>(queue < 0 ? cfg_.roce_queue : queue);
    // RoCE keeps its DSCP; another class gets the class selector of its queue (CS1 = 8 ...).
    q.dscp = static_cast<std::uint8_t>(q.queue == cfg_.roce_queue ? cfg_.roce_dscp : 8 * q.queue);
    if (window_cc()) {
      // The path's switches, and its idle round trip: an MTU packet's store and forward over
      // each hop and its ACK's return (NSCC's first base round trip; Swift's target over it).
      for (int port : fabric_.path(work_.agents[src_agent].gpu, work_.agents[dst_agent].gpu)) {
        const Port& P = fabric_.ports()[static_cast<std::size_t>(port)];
        q.hops += fabric_.node_is_endpoint(P.node) ? 0 : 1;
        // A packet's and its ACK's bytes, with both frames' preamble and gap.
        q.path_rtt += 2 * P.delay + serialization(cfg_.mtu + kHeaderBytes + kAckFrame + kWireOverhead, P.bps);
      }
      if (cfg_.cc == CongestionControl::kHpcc) {
        q.hpcc = hpcc_start(hpcc_params(q));
        q.window = q.hpcc.window;
      } else if (cfg_.cc == CongestionControl::kSwift) {
        q.swift = swift_start(swift_params(q), q.hops);
        q.window = q.swift.window;
      } else {
        q.nscc = nscc_start(nscc_params(q));
        q.window = q.nscc.cwnd;
      }
    }
    qps_.push_back(std::move(q));
  }
  return it->second;
}

void Nic::expect(int flow, int src_agent, int dst_agent, std::int64_t bytes) {
  for_each_part(cfg_, bytes, [&](int i, std::int64_t pk, std::int64_t part_bytes) {
    QueuePair& q = qps_[static_cast<std::size_t>(qp_for(src_agent, dst_agent, i))];
    if (cfg_.mode == SimMode::kFlow) return;
    QpMessage m{q.psn_planned, q.psn_planned + static_cast<std::uint32_t>(pk), part_bytes, flow};
    q.psn_planned = m.psn_end;
    q.rx.push_back(m);
  });
}

void Nic::post(int flow, int src_agent, int dst_agent, std::int64_t bytes) {
  // (The receiver lists the message already: expect.)
  for_each_part(cfg_, bytes, [&](int i, std::int64_t pk, std::int64_t part_bytes) {
    const int qp = qp_for(src_agent, dst_agent, i);
    QueuePair& q = qps_[static_cast<std::size_t>(qp)];
    QpMessage m{q.psn_assigned, q.psn_assigned + static_cast<std::uint32_t>(pk), part_bytes, flow};
    q.psn_assigned = m.psn_end;
    q.unacked.push_back(m);
    activate(qp);
  });
}

bool Nic::qp_has_data(const QueuePair& q) const { return q.snd_nxt < q.psn_assigned || !q.retransmit.empty(); }

void Nic::activate(int qp) {
  QueuePair& q = qps_[qp];
  if (!q.active) {
    q.active = true;
    active_qps_[q.src].push_back(qp);
  }
  for (int port : fabric_.node_ports(q.src)) fabric_.try_send(port);
}

std::uint32_t Nic::pull(int node, int port) {
  auto& list = active_qps_[node];
  if (list.empty()) return kNoPacket;
  const Time now = clock();
  Time earliest = kNever;
  std::uint32_t id = kNoPacket;
  std::size_t n = list.size(), start = rr_qp_[node] % n;
  bool stale = false;
  for (std::size_t i = 0; i < n && id == kNoPacket; ++i) {
    const std::size_t idx = start + i < n ? start + i : start + i - n;
    int qp = list[idx];
    QueuePair& q = qps_[qp];
    if (!qp_has_data(q)) {
      stale = true;
      continue;
    }
    if (q.next_send > now) {
      earliest = std::min(earliest, q.next_send);
      continue;
    }
    if (window_full(q)) continue;  // the window's bytes are in flight; an ACK reopens it
    const Port& P = fabric_.ports()[port];
    if (P.c[q.queue].paused(now)) continue;  // its class is paused here
    // Would this QP's next packet leave through `port`?
    if (q.route_generation != fabric_.route_generation()) {
      q.route_generation = fabric_.route_generation();
      q.route_port = fabric_.fixed_port(node, q);
    }
    if (q.route_port == Fabric::kUnroutable) continue;
    bool usable = q.route_port == port;
    if (q.route_port == Fabric::kChosenPerPacket) {
      const Fabric::Candidates next = fabric_.routes_to(node, fabric_.gpu_rank_of(q.dst));
      const std::int32_t* c = next.ports;
      const int count = next.n;
      if (cfg_.lb == LoadBalancing::kSpray || (cfg_.lb == LoadBalancing::kAdaptive && cfg_.ar_granularity == ArGranularity::kPacket)) {
        for (int k = 0; k < count; ++k) usable = usable || c[k] == port;
      } else {  // flowlets (of adaptive routing too)
        bool fresh = q.flowlet_port < 0 || now - q.flowlet_last >= cfg_.flowlet_gap;
        if (!fresh) {
          bool valid = false;
          for (int k = 0; k < count; ++k) valid = valid || c[k] == q.flowlet_port;
          fresh = !valid;
        }
        if (fresh)
          for (int k = 0; k < count; ++k) usable = usable || c[k] == port;
        else usable = q.flowlet_port == port;
        if (usable) {
          q.flowlet_port = port;
          q.flowlet_last = now;
        }
      }
    }
    if (!usable) continue;
    rr_qp_[node] = idx + 1;
    id = make_data_packet(qp);
  }
  if (stale) {
    list.erase(std::remove_if(list.begin(), list.end(),
                              [&](int qp) {
                                if (qp_has_data(qps_[qp])) return false;
                                qps_[qp].active = false;
                                return true;
                              }),
               list.end());
  }
  if (id == kNoPacket && earliest != kNever) fabric_.wake_at(port, earliest);
  return id;
}

std::uint32_t Nic::make_data_packet(int qp) {
  QueuePair& q = qps_[qp];
  const Time now = clock();
  std::uint32_t psn;
  bool again;
  if (!q.retransmit.empty()) {
    psn = q.retransmit.front();
    q.retransmit.erase(q.retransmit.begin());
    again = true;
  } else {
    psn = q.snd_nxt++;
    again = psn < q.snd_max;
  }
  if (again) ++sh().counters.retransmissions;
  bool was_idle = q.snd_una >= q.snd_max;
  q.snd_max = std::max(q.snd_max, psn + 1);
  const QpMessage* held = message_holding(q.unacked, psn);
  if (!held) throw InternalError("simulator: PSN without a message");
  const QpMessage& m = *held;
  std::uint32_t index = psn - m.psn_begin, count = m.psn_end - m.psn_begin;
  if (!again && index + 1 == count) agents_.message_sent(m.flow);
  std::int64_t payload = index + 1 < count ? cfg_.mtu : m.bytes - cfg_.mtu * static_cast<std::int64_t>(count - 1);
  Opcode op = Opcode::kOnly;
  if (cfg_.write_mode == WriteMode::kFirstMiddleLast && count > 1)
    op = index == 0 ? Opcode::kFirst : index + 1 == count ? Opcode::kLast : Opcode::kMiddle;
  std::uint32_t id = pool_.alloc(sh().index);
  Packet& p = pool_[id];
  p.type = PacketType::kData;
  p.opcode = op;
  p.queue = q.queue;
  p.dscp = q.dscp;
  p.ect = true;
  p.sport = q.sport;
  p.src = q.src;
  p.dst = q.dst;
  p.qp = static_cast<std::uint32_t>(qp);
  p.psn = psn;
  p.payload = static_cast<std::uint32_t>(payload);
  p.frame = kHeaderBytes + p.payload + (op == Opcode::kFirst || op == Opcode::kOnly ? kRethBytes : 0) +
            (cfg_.cc == CongestionControl::kHpcc ? kIntBytes : 0);
  if (cfg_.cc == CongestionControl::kHpcc) pool_.telemetry(id).n = 0;
  p.port = -2;
  p.sent_at = now;
  ++sh().counters.data_packets;
  sh().counters.bytes_sent += payload;
  q.last_sent = now;
  if (q.rate > 0) {
    double gap = (p.frame + kWireOverhead) * 8e12 / q.rate;
    if (window_cc() && cfg_.pacing_jitter > 0)
      gap *= 1 + cfg_.pacing_jitter * (std::uniform_real_distribution<double>(0, 1)(eng_.rng(q.src).jitter) - 0.5);
    q.next_send = now + static_cast<Time>(std::llround(gap));
  }
  if (q.cc_timers) {
    q.byte_counter += payload;
    if (q.byte_counter >= cfg_.dcqcn_byte_counter) {
      q.byte_counter = 0;
      ++q.b_stage;
      rate_increase(q);
    }
  }
  if (was_idle) q.last_progress = now;
  if (!q.rto_armed) {
    q.rto_armed = true;
    eng_.schedule(now + cfg_.rto, q.src, kRto, static_cast<std::uint64_t>(qp));
  }
  return id;
}

void Nic::send_control(int from, int to, int qp, PacketType type, std::uint32_t psn, std::uint32_t trimmed_psn) {
  std::uint32_t id = pool_.alloc(sh().index);
  Packet& p = pool_[id];
  p.type = type;
  bool cnp = type == PacketType::kCnp;
  p.queue = cnp ? static_cast<std::uint8_t>(cfg_.cnp_queue) : qps_[qp].queue;
  p.dscp = cnp ? static_cast<std::uint8_t>(cfg_.cnp_dscp) : qps_[qp].dscp;
  p.frame = cnp ? kCnpFrame : kAckFrame;
  p.src = from;
  p.dst = to;
  p.qp = static_cast<std::uint32_t>(qp);
  p.psn = psn;
  p.msn = qps_[qp].msn;
  p.sport = qps_[qp].sport;
  p.port = -1;
  if (type == PacketType::kAck) {
    p.sent_at = echo().sent_at;  // the answered packet's send time and congestion mark
    p.ecn_echo = echo().ce;
  }
  if (trimmed_psn != ~0u) {
    p.trimmed = true;
    p.nacked_psn = trimmed_psn;
  }
  if (cfg_.cc == CongestionControl::kHpcc) pool_.telemetry(id) = type == PacketType::kAck ? echo().stamps : IntStack{};
  fabric_.send(from, id);
}

void Nic::receive(std::uint32_t id) {
  // A copy: answering (ACK, NAK, CNP) takes packets from the pool, which may move its slots.
  const Packet p = pool_[id];
  echo().sent_at = p.sent_at;
  echo().ce = p.ce;
  if (cfg_.cc == CongestionControl::kHpcc) echo().stamps = pool_.telemetry(id);
  int qp = static_cast<int>(p.qp);
  QueuePair& q = qps_[qp];
  switch (p.type) {
    case PacketType::kData: receive_data(q, qp, p); break;
    case PacketType::kAck: receive_ack(q, qp, p, false); break;
    case PacketType::kNak: receive_ack(q, qp, p, true); break;
    case PacketType::kCnp: receive_cnp(q, qp); break;
    case PacketType::kPause: break;
  }
  pool_.release(sh().index, id);
}

void Nic::receive_data(QueuePair& q, int qp, const Packet& p) {
  const Time now = clock();
  auto credit = [&] {
    if (const QpMessage* m = message_holding(q.rx, p.psn)) agents_.flows()[static_cast<std::size_t>(m->flow)].delivered_bytes += p.payload;
    q.delivered_bytes += p.payload;
    sh().counters.bytes_delivered += p.payload;
  };
  if (p.ce && cfg_.cc == CongestionControl::kDcqcn && (!q.cnp_sent_once || now - q.last_cnp >= cfg_.cnp_interval)) {
    q.cnp_sent_once = true;
    q.last_cnp = now;
    ++sh().counters.cnps;
    send_control(q.dst, q.src, qp, PacketType::kCnp, 0);
  }
  const bool accept_ahead = cfg_.write_mode == WriteMode::kWriteOnly || cfg_.retransmit == Retransmit::kSelective;
  const std::uint32_t psn = p.psn;
  if (p.trimmed) {
    // Its header says which PSN was cut: ask for that one again at once (unless it came).
    if (psn >= q.epsn && !std::binary_search(q.ahead.begin(), q.ahead.end(), psn)) {
      ++sh().counters.naks;
      send_control(q.dst, q.src, qp, PacketType::kNak, q.epsn, psn);
    }
    return;
  }
  if (psn < q.epsn || std::binary_search(q.ahead.begin(), q.ahead.end(), psn)) {
    ++sh().counters.duplicates;
    send_control(q.dst, q.src, qp, PacketType::kAck, q.epsn);
    return;
  }
  if (psn > q.epsn) {
    if (cfg_.write_mode == WriteMode::kWriteOnly) ++sh().counters.reordered;
    else ++sh().counters.out_of_order;
    // With trimming, a receiver that places packets as they come leaves gaps to the trims'
    // NACKs (and the timeout): under spraying a gap is mostly a packet still on its way.
    bool nak = !accept_ahead || (cfg_.retransmit == Retransmit::kSelective && !cfg_.trim);
    if (nak && q.nak_for != q.epsn) {
      q.nak_for = q.epsn;
      ++sh().counters.naks;
      send_control(q.dst, q.src, qp, PacketType::kNak, q.epsn);
    }
    if (!accept_ahead) return;  // First/Middle/Last must arrive in order: dropped
    q.ahead.insert(std::upper_bound(q.ahead.begin(), q.ahead.end(), psn), psn);
    credit();
    ++q.since_ack;
    return;
  }
  credit();
  ++q.epsn;
  std::size_t consumed = 0;
  while (consumed < q.ahead.size() && q.ahead[consumed] == q.epsn) {
    ++q.epsn;
    ++consumed;
  }
  if (consumed) q.ahead.erase(q.ahead.begin(), q.ahead.begin() + static_cast<std::ptrdiff_t>(consumed));
  ++q.since_ack;
  bool message_end = false;
  while (!q.rx.empty() && q.rx.front().psn_end <= q.epsn) {
    int flow = q.rx.front().flow;
    q.rx.pop_front();
    ++q.msn;
    message_end = true;
    agents_.message_delivered(flow);
  }
  // Window congestion control acknowledges every packet: its signals ride on the ACKs, and a
  // window smaller than a coalescing group would wait for an ACK that never comes.
  if (message_end || q.since_ack >= cfg_.ack_every || window_cc()) {
    q.since_ack = 0;
    send_control(q.dst, q.src, qp, PacketType::kAck, q.epsn);
  }
}

void Nic::receive_ack(QueuePair& q, int qp, const Packet& p, bool nak) {
  const std::uint32_t e = p.psn;
  if (window_cc()) {
    if (nak) window_on_loss(q, p.trimmed);
    else if (e > q.snd_una) window_on_ack(q, p, e - q.snd_una);
  }
  if (e > q.snd_una) {
    q.snd_una = e;
    q.last_progress = clock();
    while (!q.unacked.empty() && q.unacked.front().psn_end <= q.snd_una) {
      int flow = q.unacked.front().flow;
      q.unacked.pop_front();
      agents_.message_acked(flow);
    }
    q.retransmit.erase(std::remove_if(q.retransmit.begin(), q.retransmit.end(), [&](std::uint32_t s) { return s < q.snd_una; }),
                       q.retransmit.end());
  }
  if (q.snd_nxt < q.snd_una) q.snd_nxt = q.snd_una;
  if (window_cc() && !nak) activate(qp);  // the window has room again, or a new rate
  if (nak && p.trimmed) {
    // A trimmed packet: resend that PSN (go-back-N: from it).
    const std::uint32_t t = p.nacked_psn;
    if (t >= q.snd_una && t < q.snd_max) {
      if (cfg_.retransmit == Retransmit::kGoBackN) q.snd_nxt = std::min(q.snd_nxt, t);
      else if (std::find(q.retransmit.begin(), q.retransmit.end(), t) == q.retransmit.end()) q.retransmit.push_back(t);
    }
    activate(qp);
  } else if (nak && e < q.snd_max) {
    if (cfg_.retransmit == Retransmit::kGoBackN) {
      if (q.snd_nxt > e) q.snd_nxt = e;
    } else if (std::find(q.retransmit.begin(), q.retransmit.end(), e) == q.retransmit.end()) {
      q.retransmit.push_back(e);
    }
    activate(qp);
  }
}

void Nic::rto_check(int qp) {
  QueuePair& q = qps_[qp];
  q.rto_armed = false;
  if (q.snd_una >= q.snd_max) return;  // nothing outstanding; re-armed by the next send
  const Time now = clock();
  if (now - q.last_progress >= cfg_.rto) {
    ++sh().counters.timeouts;
    if (window_cc()) window_on_loss(q, true);
    if (cfg_.retransmit == Retransmit::kGoBackN) q.snd_nxt = q.snd_una;
    else if (std::find(q.retransmit.begin(), q.retransmit.end(), q.snd_una) == q.retransmit.end())
      q.retransmit.push_back(q.snd_una);
    q.last_progress = now;
    activate(qp);
  }
  q.rto_armed = true;
  eng_.schedule(q.last_progress + cfg_.rto, q.src, kRto, static_cast<std::uint64_t>(qp));
}

// --- Window congestion control (window_cc.h) ---

bool Nic::window_full(const QueuePair& q) const {
  if (q.window <= 0 || !q.retransmit.empty()) return false;
  const double inflight = static_cast<double>(q.snd_nxt - q.snd_una) * static_cast<double>(cfg_.mtu);
  return inflight >= std::max(q.window, static_cast<double>(cfg_.mtu));
}

HpccParams Nic::hpcc_params(const QueuePair& q) const {
  HpccParams p;
  p.line_bps = line_rate(q.src);
  p.base_rtt_s = to_seconds(cfg_.hpcc_rtt);
  p.eta = cfg_.hpcc_eta;
  p.max_stage = cfg_.hpcc_max_stage;
  p.w_ai = (cfg_.hpcc_rai > 0 ? cfg_.hpcc_rai : p.line_bps / 2000) / 8 * p.base_rtt_s;
  return p;
}

SwiftParams Nic::swift_params(const QueuePair& q) const {
  SwiftParams p;
  p.mtu = static_cast<double>(cfg_.mtu);
  p.base_target = q.path_rtt + cfg_.swift_base_target;
  p.per_hop = cfg_.swift_per_hop;
  p.fs_range = cfg_.swift_fs_range;
  p.ai = cfg_.swift_ai;
  p.beta = cfg_.swift_beta;
  p.max_mdf = cfg_.swift_max_mdf;
  p.line_bps = line_rate(q.src);
  p.max_cwnd = p.line_bps / 8 * to_seconds(swift_target(p, q.hops, p.fs_max_cwnd)) / p.mtu * 4;
  return p;
}

NsccParams Nic::nscc_params(const QueuePair& q) const {
  NsccParams p;
  p.mtu = static_cast<double>(cfg_.mtu);
  p.line_bps = line_rate(q.src);
  p.base_rtt = q.path_rtt;
  p.target_fraction = cfg_.nscc_target_fraction;
  p.pi = cfg_.nscc_pi;
  p.fi = cfg_.nscc_fi;
  p.gamma = cfg_.nscc_gamma;
  p.max_md = cfg_.nscc_max_md;
  return p;
}

void Nic::window_on_ack(QueuePair& q, const Packet& ack, std::uint32_t newly_acked) {
  if (cfg_.cc == CongestionControl::kHpcc) {
    hpcc_on_ack(hpcc_params(q), q.hpcc, echo().stamps, ack.psn, q.snd_nxt);
    window_set(q, q.hpcc.window, q.hpcc.pacing_bps);
  } else if (cfg_.cc == CongestionControl::kSwift) {
    const Time now = clock();
    swift_on_ack(swift_params(q), q.swift, q.hops, now - ack.sent_at, static_cast<int>(newly_acked), now);
    window_set(q, q.swift.window, q.swift.pacing_bps);
  } else {
    const Time now = clock();
    const double mtu = static_cast<double>(cfg_.mtu);
    nscc_on_ack(nscc_params(q), q.nscc, now - ack.sent_at, ack.ecn_echo, newly_acked * mtu,
                static_cast<double>(q.snd_nxt - q.snd_una) * mtu, now);
    window_set(q, q.nscc.cwnd, 0);
  }
}

void Nic::window_on_loss(QueuePair& q, bool lost) {
  if (cfg_.cc == CongestionControl::kSwift) {
    swift_on_loss(swift_params(q), q.swift, clock());
    window_set(q, q.swift.window, q.swift.pacing_bps);
  } else if (cfg_.cc == CongestionControl::kNscc && lost) {
    const double mtu = static_cast<double>(cfg_.mtu);
    nscc_on_nack(nscc_params(q), q.nscc, mtu, static_cast<double>(q.snd_nxt - q.snd_una) * mtu, clock());
    window_set(q, q.nscc.cwnd, 0);
  }
  // HPCC reacts to telemetry, not to losses.
}

void Nic::window_set(QueuePair& q, double window, double pacing_bps) {
  q.window = window;
  if (pacing_bps == q.rate) return;
  q.rate = pacing_bps;
  // The next packet may leave as the new rate allows: a gap drawn at a much lower rate would
  // otherwise hold the sender long after its window grew.
  const Time gap = pacing_bps > 0 ? serialization(cfg_.mtu + kHeaderBytes, pacing_bps) : 0;
  q.next_send = std::min(q.next_send, q.last_sent + gap);
}

// --- DCQCN reaction point (Zhu et al., SIGCOMM 2015, section 3.2) ---

void Nic::receive_cnp(QueuePair& q, int qp) {
  ++q.cnps_received;
  if (cfg_.cc != CongestionControl::kDcqcn) return;
  const Time now = clock();
  if (q.rate == 0) q.rate = q.target = line_rate(q.src);
  // The target drops to the current rate only if the rate rose since the last cut; back-to-
  // back cuts keep the old target, so fast recovery returns toward it (ConnectX behaviour
  // with target clamping off).
  if (q.t_stage > 0 || q.b_stage > 0) q.target = q.rate;
  q.rate = std::max(cfg_.dcqcn_min_rate, q.rate * (1 - q.alpha / 2));
  q.alpha = (1 - cfg_.dcqcn_g) * q.alpha + cfg_.dcqcn_g;
  q.cnp_since_alpha = true;
  q.byte_counter = 0;
  q.t_stage = q.b_stage = 0;
  ++q.rate_epoch;
  eng_.schedule(now + cfg_.dcqcn_rate_timer, q.src, kRateTimer,
                   static_cast<std::uint64_t>(qp) << 32 | q.rate_epoch);
  if (!q.cc_timers) {
    q.cc_timers = true;
    eng_.schedule(now + cfg_.dcqcn_alpha_timer, q.src, kAlphaTimer, static_cast<std::uint64_t>(qp));
  }
}

void Nic::alpha_timer(int qp) {
  QueuePair& q = qps_[qp];
  if (!q.cc_timers) return;
  if (!q.cnp_since_alpha) q.alpha *= 1 - cfg_.dcqcn_g;
  q.cnp_since_alpha = false;
  eng_.schedule(clock() + cfg_.dcqcn_alpha_timer, q.src, kAlphaTimer, static_cast<std::uint64_t>(qp));
}

void Nic::rate_timer(int qp, std::uint32_t epoch) {
  QueuePair& q = qps_[qp];
  if (!q.cc_timers || epoch != q.rate_epoch) return;
  ++q.t_stage;
  rate_increase(q);
  if (q.cc_timers)
    eng_.schedule(clock() + cfg_.dcqcn_rate_timer, q.src, kRateTimer, static_cast<std::uint64_t>(qp) << 32 | epoch);
}

void Nic::rate_increase(QueuePair& q) {
  const double line = line_rate(q.src);
  const int f = cfg_.dcqcn_f;
  const double rai = cfg_.dcqcn_rai > 0 ? cfg_.dcqcn_rai : line * 1e-3;
  const double rhai = cfg_.dcqcn_rhai > 0 ? cfg_.dcqcn_rhai : 10 * rai;
  if (std::min(q.t_stage, q.b_stage) > f) q.target += rhai;                      // hyper increase
  else if (std::max(q.t_stage, q.b_stage) > f) q.target += rai;                  // additive increase
  q.target = std::min(q.target, line);                                            // (else fast recovery)
  q.rate = (q.target + q.rate) / 2;
  if (q.rate >= line * 0.999) {
    // Back at line rate: no more limiting, timers stop until the next CNP.
    q.rate = 0;
    q.cc_timers = false;
    ++q.rate_epoch;
  }
}

std::int64_t Nic::message_bytes(const Packet& p) const {
  const QpMessage* m = message_holding(qps_[p.qp].unacked, p.psn);
  return m ? m->bytes : p.payload;
}

}  // namespace weft::sim
