// The NIC as a part of the simulator: the GPUs' RoCEv2 reliable-connection queue pairs.
// A message is cut into MTU packets with PSNs over up to rdma.qps queue pairs of its
// connection (WRITE First/Middle/Last or Only, or Write-Only); the receiver acknowledges
// (coalesced ACKs), NAKs sequence errors and trimmed packets, and sends CNPs (the DCQCN
// notification point); the sender retransmits (go-back-N or selective, with a timeout) and
// paces each queue pair by its congestion control: the DCQCN reaction point, or the window
// controls HPCC, Swift and NSCC (window_cc.h).
//
// Its arrays are per queue pair (QueuePair: made before the run, looked up by connection
// and part) and per GPU node (the queue pairs with data, a round-robin cursor). The fabric
// pulls the next packet when an endpoint's port is free (pull) and hands over what arrives
// (receive); the NIC posts into the fabric (try_send, send) and tells the agents when a
// message is sent, delivered and acknowledged, by direct calls. Its timers are the engine's
// events; what it keeps per thread (what an ACK echoes) is kept by the shard index.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "weft/sim/config.h"
#include "weft/sim/huge_pages.h"
#include "weft/sim/packet.h"
#include "weft/sim/parallel_engine.h"
#include "weft/sim/queue_pair.h"
#include "weft/sim/topology.h"
#include "weft/sim/window_cc.h"
#include "weft/sim/workload.h"

namespace weft::sim {

class Agents;
class Fabric;

// A message of `bytes` is cut into MTU packets over up to rdma.qps queue pairs of its
// connection: its packets, its parts, and f(i, packets, bytes) for each part i.
inline std::int64_t packets_of(const SimConfig& cfg, std::int64_t bytes) {
  return std::max<std::int64_t>(1, (bytes + cfg.mtu - 1) / cfg.mtu);
}
inline int parts_of(const SimConfig& cfg, std::int64_t bytes) {
  return static_cast<int>(std::min<std::int64_t>(cfg.qps_per_connection, packets_of(cfg, bytes)));
}
template <class F>
void for_each_part(const SimConfig& cfg, std::int64_t bytes, F&& f) {
  const std::int64_t packets = packets_of(cfg, bytes);
  const int parts = parts_of(cfg, bytes);
  std::int64_t given = 0;
  for (int i = 0; i < parts; ++i) {
    const std::int64_t pk = packets / parts + (i < packets % parts ? 1 : 0);
    const std::int64_t part_bytes = i + 1 == parts ? bytes - given : std::min(bytes - given, pk * cfg.mtu);
    given += part_bytes;
    f(i, pk, part_bytes);
  }
}

class Nic {
 public:
  Nic(Engine& engine, PacketPool& pool, Fabric& fabric, Agents& agents, const Topology& topo, const SimConfig& cfg,
      const Workload& work);
  // Once the fabric is prepared: the per-node lists.
  void prepare();
  // Before the run: the per-thread state; from then on queue pairs are only looked up.
  void begin(int shards);

  // The queue pair of part `part` of the connection from one agent to another (made on
  // first use, before the run).
  int qp_for(int src_agent, int dst_agent, int part);
  // Before the run: the receiver of message `flow` lists its parts, in its sender's order
  // (the queue pairs are made here; in the flow-level mode only those).
  void expect(int flow, int src_agent, int dst_agent, std::int64_t bytes);
  // Posts message `flow` (its parts on their queue pairs) for the endpoints' ports to pull.
  void post(int flow, int src_agent, int dst_agent, std::int64_t bytes);

  // --- The fabric's calls (per packet) ---
  // The next data packet for a free port of GPU node `node`, kNoPacket when none may leave
  // by it now (a wake-up is scheduled for the earliest paced one). Marked with port -2.
  static constexpr std::uint32_t kNoPacket = ~0u;
  std::uint32_t pull(int node, int port);
  // A packet arrived at its destination GPU (released here).
  void receive(std::uint32_t id);
  // The length of the message a First or Only packet starts, from its sender's messages not
  // yet acknowledged (a late duplicate of an acknowledged message: its own payload).
  std::int64_t message_bytes(const Packet& p) const;
  // Prefetch for a transmission's end at GPU node `node`: the queue pair pull() will ask first.
  void prefetch_next(int node, int stage) const;
  void prefetch_receive(std::uint32_t qp) const;

  // The ports a packet of queue pair `qp` leaves by under ECMP (its 5-tuple's choices).
  std::vector<int> path_of(int qp) const;
  const std::vector<QueuePair, HugePageAllocator<QueuePair>>& qps() const { return qps_; }
  std::vector<QueuePair, HugePageAllocator<QueuePair>>& qps() { return qps_; }  // (the samplers keep their totals in them)

 private:
  static void on_rto(void* n, std::uint64_t arg);
  static void on_alpha_timer(void* n, std::uint64_t arg);
  static void on_rate_timer(void* n, std::uint64_t arg);
  static Time clock() { return Engine::now(); }
  static Engine::Shard& sh() { return Engine::shard(); }
  void activate(int qp);
  bool qp_has_data(const QueuePair& q) const;
  std::uint32_t make_data_packet(int qp);
  void receive_data(QueuePair& q, int qp, const Packet& p);
  void receive_ack(QueuePair& q, int qp, const Packet& p, bool nak);
  void receive_cnp(QueuePair& q, int qp);
  // Window congestion control: HPCC's switches stamp a data packet as it leaves (the pool's
  // telemetry); an ACK echoes the stamps and the send time of the packet it answers (the
  // thread's Echo); the sender's window and pacing follow (window_cc.h).
  bool window_cc() const {
    return cfg_.cc == CongestionControl::kHpcc || cfg_.cc == CongestionControl::kSwift || cfg_.cc == CongestionControl::kNscc;
  }
  void window_on_ack(QueuePair& q, const Packet& ack, std::uint32_t newly_acked);
  void window_on_loss(QueuePair& q, bool lost);  // lost: trimmed or timed out, not a sequence NAK
  bool window_full(const QueuePair& q) const;
  void window_set(QueuePair& q, double window, double pacing_bps);
  HpccParams hpcc_params(const QueuePair& q) const;
  SwiftParams swift_params(const QueuePair& q) const;
  NsccParams nscc_params(const QueuePair& q) const;
  void send_control(int from, int to, int qp, PacketType type, std::uint32_t psn, std::uint32_t trimmed_psn = ~0u);
  void rto_check(int qp);
  void alpha_timer(int qp);
  void rate_timer(int qp, std::uint32_t epoch);
  void rate_increase(QueuePair& q);
  double line_rate(int node) const;

  Engine& eng_;
  PacketPool& pool_;
  Fabric& fabric_;
  Agents& agents_;
  const Topology& topo_;
  const SimConfig& cfg_;
  const Workload& work_;
  std::uint32_t kRto, kAlphaTimer, kRateTimer;  // the engine's kinds
  struct Echo {
    Time sent_at = 0;  // when the packet being received was sent
    bool ce = false;   // whether it arrived CE-marked (NSCC)
    IntStack stamps;   // HPCC: its telemetry
  };
  std::vector<Echo> echo_;  // by the engine's shard index: what an ACK sent in answer echoes
  Echo& echo() { return echo_[static_cast<std::size_t>(sh().index)]; }
  bool running_ = false;
  std::vector<QueuePair, HugePageAllocator<QueuePair>> qps_;
  std::unordered_map<std::uint64_t, int> qp_index_;
  std::vector<std::vector<int>> active_qps_;  // per GPU node
  std::vector<std::size_t> rr_qp_;            // per GPU node: round-robin cursor
  std::vector<int> qps_created_;              // per GPU node
};

}  // namespace weft::sim
