// The fabric as a part of the simulator: ports with eight priority queues, links with their
// delay, jitter and losses, switches that route (ECMP, weighted ECMP, spraying, flowlets,
// adaptive routing), queue (per output port or in virtual output queues), mark (WRED/ECN),
// trim, and pause (PFC with dynamic thresholds, headroom and a watchdog) out of a shared
// buffer; failures, and rerouting after them. A packet enters at a node (send) or at a
// port's queue (the NIC's packets, pulled when an endpoint's port is free) and leaves by
// the port its routes and load balancing pick, frame by frame, to arrive at the peer after
// the link's delay; at its destination the NIC receives it.
//
// Its arrays are per port (Port, the VOQs), per node (buffers, seeds, the one-link ports,
// routing rows) and the routing tables (RouteColumns: a table column per anchor switch, not
// per GPU). Its events run on the engine (parallel_engine.h), its random draws come from the
// acting node's streams; what it keeps per thread (flowlet choices, PFC transitions) is kept
// by the engine's shard index. It calls the NIC directly (nic.h: pull a packet for a free
// endpoint port, receive one that arrived); the link capture observes what it transmits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "weft/sim/config.h"
#include "weft/sim/huge_pages.h"
#include "weft/sim/link_capture.h"
#include "weft/sim/packet.h"
#include "weft/sim/parallel_engine.h"
#include "weft/sim/port.h"
#include "weft/sim/queue_pair.h"
#include "weft/sim/samplers.h"
#include "weft/sim/topology.h"
#include "weft/sim/voq.h"
#include "weft/sim/workload.h"

namespace weft::sim {

class Nic;

// The routing columns of a topology (the fabric's routes, and its memory estimate).
struct RouteColumns {
  std::vector<int> of_gpu;     // column of each GPU rank
  std::vector<int> target;     // node each column routes toward
  std::vector<int> last_link;  // per GPU rank: the link from its anchor to it (-1: own column)
  int routed_nodes = 0;        // nodes with more than one link: those that keep a table
  static RouteColumns of(const Topology& t);
  int count() const { return static_cast<int>(target.size()); }
};

class Fabric {
 public:
  Fabric(Engine& engine, PacketPool& pool, Nic& nic, const Topology& topo, const SimConfig& cfg,
         const std::vector<Failure>& failures);
  // What a run holds, roughly: the routing tables (a slot and at least one candidate port
  // per node and routing destination), then the ports and the workload's steps.
  struct MemoryEstimate {
    double routes, total;  // bytes
    int destinations;      // routing columns
    int routed_nodes;      // nodes with a table (more than one link)
  };
  static MemoryEstimate estimate_memory(const Topology& topology, const Workload& workload, const RouteColumns& columns);
  // The checks that need no workload built: the memory of the routing tables and ports, each
  // switch's buffer against its ports' PFC headroom, what the flow-level mode models.
  // Throws ConfigError.
  static void check_setup(const Topology& topology, const SimConfig& config, const Workload& workload,
                          const RouteColumns& columns);
  const RouteColumns& columns() const { return columns_; }
  // Ports, routes, buffers and seeds (after the configuration is final; throws ConfigError
  // for a failure naming an unknown node).
  void prepare();
  // Before the run: the per-thread state, and the failures on the coordinator.
  void begin(int shards);

  // --- The NIC's calls (per packet) ---
  // Starts the port's next frame if it is free and something waits.
  void try_send(int port);
  // A packet made at `node` (an ACK, a NAK, a CNP) leaves by the port its routes pick,
  // queued in its class; lost (counted) when no port toward its destination is up.
  void send(int node, std::uint32_t id);
  // The equal-cost next ports from `node` toward GPU rank `dst_gpu` (n 0: no route).
  struct Candidates {
    const std::int32_t* ports;
    int n;
  };
  Candidates routes_to(int node, int dst_gpu) const;
  // The port of `node` by which the packets of `q` leave, when the routes fix it (one
  // candidate, or ECMP's hash of the QP's tuple); kUnroutable, or kChosenPerPacket
  // (spraying, flowlets, adaptive routing).
  static constexpr int kUnroutable = -1, kChosenPerPacket = -2;
  int fixed_port(int node, const QueuePair& q) const;
  // An endpoint port whose queue pairs are paced: try it again at `at` (once, the earliest).
  void wake_at(int port, Time at);
  // Bumped when routes or links change (QueuePair::route_port).
  std::uint32_t route_generation() const { return route_generation_; }
  // A packet trimmed to its headers in the CNP queue; false when it cannot be (not data, or
  // already trimmed).
  bool trim(Packet& p);

  // --- What the other parts and the observers read ---
  const std::vector<Port, HugePageAllocator<Port>>& ports() const { return ports_; }
  std::vector<Port, HugePageAllocator<Port>>& ports() { return ports_; }
  const std::vector<int>& node_ports(int node) const { return node_ports_[static_cast<std::size_t>(node)]; }
  int gpu_rank_of(int node) const { return gpu_rank_of_node_[static_cast<std::size_t>(node)]; }
  bool node_is_endpoint(int node) const { return topo_.nodes[static_cast<std::size_t>(node)].kind == NodeKind::kGpu; }
  std::int64_t buffer_peak(int node) const { return buffer_peak_[static_cast<std::size_t>(node)]; }
  // A port's class queue when the switch queues per input (queuing=voq), else null.
  const VirtualOutputQueues* voq_of(int port, int q) const {
    return voqs_.empty() || topo_.nodes[static_cast<std::size_t>(ports_[static_cast<std::size_t>(port)].node)].kind != NodeKind::kSwitch
               ? nullptr : &voqs_[static_cast<std::size_t>(port) * 8 + static_cast<std::size_t>(q)];
  }
  // The ports a packet from GPU rank src to dst leaves by: each hop's ECMP choice for
  // `probe`'s 5-tuple, or without one the first of the equal-cost ports; empty without a
  // route (or for src == dst).
  std::vector<int> path(int src_gpu, int dst_gpu, const Packet* probe = nullptr) const;
  // The completion time of `bytes` from GPU rank src to dst on an idle fabric: each hop's
  // first-packet store and forward and propagation, the rest at the slowest link of the
  // path (the first of its equal-cost choices); 0 without a route.
  Time ideal_fct(int src_gpu, int dst_gpu, std::int64_t bytes) const;
  std::string port_name(int port) const;  // "rail-0->spine-1"
  // The PFC transitions of every thread, in time order (after the run).
  std::vector<PfcEvent> pfc_events() const;
  LinkCapture& capture() { return capture_; }

 private:
  static void on_tx_done(void* f, std::uint64_t arg);
  static void on_arrive(void* f, std::uint64_t arg);
  static void on_pause_expire(void* f, std::uint64_t arg);
  static void on_pause_refresh(void* f, std::uint64_t arg);
  static void on_endpoint_wake(void* f, std::uint64_t arg);
  static void on_failure(void* f, std::uint64_t arg);
  static void on_reroute(void* f, std::uint64_t arg);
  static void prefetch_tx_done(const void* f, std::uint64_t arg, int stage);
  static void prefetch_arrive(const void* f, std::uint64_t arg, int stage);

  static Time clock() { return Engine::now(); }
  static Engine::Shard& sh() { return Engine::shard(); }
  void build_ports();
  void compute_routes();
  // Whether ECMP's hash picks the port of a packet of `type` among several routes: always
  // for ACKs, CNPs and the like, for data unless spraying, flowlets or adaptive routing do.
  bool ecmp_decides(PacketType type) const { return type != PacketType::kData || cfg_.lb == LoadBalancing::kEcmp; }
  // The port a packet leaves `node` by, -1 when there is none that is up (no route, or a
  // failed link the routes still hold until they converge).
  int choose_port(int node, Packet& p);
  int pick_port(int node, Packet& p);  // by load balancing among the routes, up or not
  // Adaptive routing: the candidate with the least egress queue of the packet's class, plus
  // with ar.remote the least queue the next switch signalled toward the destination.
  int adaptive_pick(int node, const Packet& p, const std::int32_t* c, int n);
  std::int64_t signalled_queue(int port, int queue);
  // The equal-cost port for hash h among c[0..n): uniform, or by speed (ecmp.weighted).
  int ecmp_pick(const std::int32_t* c, int n, std::uint32_t h) const;
  std::uint32_t hash_tuple(int node, const Packet& p) const;
  void transmit(int port, std::uint32_t id);
  void tx_done(int port);
  // Schedules the end of the port's transmission as an event if something waits for it.
  void wake_at_end(int port);
  bool frame_lost(int node, const Packet& p);  // link.loss and link.ber, drawn once per frame from the sending node's stream
  Time wire_jitter(const Port& P);
  void arrive(std::uint32_t id);
  // An arrival event's argument: the packet, and the port it comes in by (for prefetch).
  static std::uint64_t arrival(std::uint32_t id, int port) { return id | (static_cast<std::uint64_t>(port) << 32); }
  void forward(int node, std::uint32_t id);
  void drop(std::uint32_t id);
  // A port's class queue, whichever way the switch queues (queuing=output or voq): the
  // packet's entry, the next packet out (requires P.holds(q)) and its removal; the byte
  // counts of the class (Port::queue_bytes) are the caller's.
  VirtualOutputQueues* voq_of(int port, int q) {
    return const_cast<VirtualOutputQueues*>(static_cast<const Fabric*>(this)->voq_of(port, q));
  }
  VirtualOutputQueues* voq_in_use(int port, int q);  // voq_of, sized on first use
  void enqueue(int port, int q, std::uint32_t id);
  std::uint32_t queue_head(int port, int q);
  std::uint32_t dequeue(int port, int q);
  // The VOQ a packet that came in by port `in` waits in: the port's place among its
  // switch's. (Every packet a switch queues came in by a port: a switch makes none, and
  // in-network reducers are endpoints on links of their switches.)
  int voq_input(int in) const;
  void dequeued_at_switch(int port, const Packet& p);
  // The ingress bytes above which a port pauses its peer: pfc.xoff, or (0) the dynamic
  // threshold pfc.alpha x the node's free shared buffer.
  std::int64_t xoff_threshold(int node) const;
  void reserve_buffers();
  void send_pfc(int port, int queue, bool pause);
  void receive_pfc(int port, const Packet& p);
  void pause_expired(int port, int queue);
  void apply_failure(const Failure& f);
  void set_link(int link, bool up, double bps);
  void reroute();

  Engine& eng_;
  PacketPool& pool_;
  Nic& nic_;
  const Topology& topo_;
  const SimConfig& cfg_;
  const std::vector<Failure>& failures_;
  std::uint32_t kTxDone, kArrive, kPauseExpire, kPauseRefresh, kEndpointWake, kFailure, kReroute;  // the engine's kinds
  struct PerThread {
    std::unordered_map<std::uint64_t, std::pair<int, Time>> flowlets;  // (node, qp) -> port, last packet
    std::vector<PfcEvent> pfc_events;
  };
  std::vector<PerThread> per_thread_;  // by the engine's shard index
  PerThread& mine() { return per_thread_[static_cast<std::size_t>(sh().index)]; }

  std::vector<Port, HugePageAllocator<Port>> ports_;
  std::vector<std::vector<int>> node_ports_;
  std::vector<int> port_slot_;             // per port: its index in its node's node_ports_
  std::vector<VirtualOutputQueues> voqs_;  // queuing=voq: per port x class (switch ports only)
  std::vector<int> link_port_;             // link -> its port at end a (peer is end b)
  // Routes (routes_to) are kept per column, not per GPU: a GPU with one link, to a switch, is reached
  // through that switch (its anchor) from everywhere else, so every GPU under one switch
  // shares the column routed toward the switch; other GPUs have a column of their own.
  // route_pool_[route_slots_[r * C + c].begin + i] for i < its count, C columns, r the node's
  // row (nodes with one link keep none: everything leaves by that link).
  RouteColumns columns_;
  std::vector<std::int32_t> anchor_port_;  // per GPU rank: its anchor's port to it (-1: none)
  std::vector<std::uint8_t> port_up_;      // per port: Port::up, packed (read by every route)
  std::uint32_t route_generation_ = 1;
  std::vector<std::int32_t> route_row_;   // per node: its table's row, -1 for a node with one link
  std::vector<std::int32_t> only_port_;   // per node with one link: that link's port
  struct RouteSlot {  // where a node's candidates toward a column start, and how many (one load)
    std::uint32_t begin = 0, count = 0;
  };
  std::vector<RouteSlot, HugePageAllocator<RouteSlot>> route_slots_;
  const RouteSlot& route_slot(std::int32_t row, int dst_gpu) const {
    return route_slots_[static_cast<std::size_t>(row) * static_cast<std::size_t>(columns_.count()) +
                        static_cast<std::size_t>(columns_.of_gpu[static_cast<std::size_t>(dst_gpu)])];
  }
  std::vector<std::int32_t, HugePageAllocator<std::int32_t>> route_pool_;
  std::vector<int> gpu_rank_of_node_;
  std::vector<std::uint32_t> switch_seed_;
  std::vector<std::uint32_t> node_ip_;  // per node: Node::ip (read by every ECMP hash)
  std::vector<std::uint32_t> rr_counter_;
  std::vector<std::int64_t> buffer_used_;  // of the shared buffer, per node
  std::vector<std::int64_t> shared_size_;  // buffer minus the headroom its ports reserve
  std::vector<std::int64_t> headroom_used_, buffer_peak_;  // per node: in headroom; most held at once
  LinkCapture capture_;
};

}  // namespace weft::sim
