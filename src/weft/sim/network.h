// The simulated fabric at run time: ports with eight priority queues, switches that
// route, mark and pause, GPU endpoints with RoCEv2 queue pairs and DCQCN, and the agents
// that turn a workload into RDMA writes. One Network is one simulation run: the composition
// of the simulator's parts, those split out so far in files of their own (each with its own
// arrays, called directly), the rest still its members.
//
//   port.h, fabric.cpp     ports, transmission, routing and load balancing, switch buffers,
//                          WRED/ECN, PFC pause/resume with watchdog, failures, set-up checks
//   queue_pair.h, rdma.cpp queue pairs: segmentation, PSNs, ACK/NAK, go-back-N or selective
//                          retransmission, CNPs, the DCQCN reaction point, HPCC, Swift, NSCC
//   run.cpp                the run: time windows, the threads' shards and their mail, merging
//   agents.h               (a part) workload steps, message matching, the flow records: agents_
//   flow_transport.h       (a part) the flow-level mode, in fluid.cpp: flow_
//   samplers.h             (an observer) counters, queues and queue pairs over time: samplers_
//   link_capture.h         (an observer) a link's frames as pcap, in pcap.cpp: capture_
//   stall.h                (an observer) why a run did not finish: find_stall
// Beside it, not members: report.cpp (summary, JSON/CSV outputs), pxn.cpp (PXN relays),
// in_network.cpp (in-network reduction), window_cc.cpp (the window controls' state).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "weft/sim/agents.h"
#include "weft/sim/config.h"
#include "weft/sim/engine.h"
#include "weft/sim/flow_transport.h"
#include "weft/sim/link_capture.h"
#include "weft/sim/packet.h"
#include "weft/sim/port.h"
#include "weft/sim/queue_pair.h"
#include "weft/sim/samplers.h"
#include "weft/sim/stall.h"
#include "weft/sim/topology.h"
#include "weft/sim/voq.h"
#include "weft/sim/window_cc.h"
#include "weft/sim/workload.h"

namespace weft::sim {

// The routing columns of a topology (Network's routes, and its memory estimate).
struct RouteColumns {
  std::vector<int> of_gpu;     // column of each GPU rank
  std::vector<int> target;     // node each column routes toward
  std::vector<int> last_link;  // per GPU rank: the link from its anchor to it (-1: own column)
  int routed_nodes = 0;        // nodes with more than one link: those that keep a table
  static RouteColumns of(const Topology& t);
  int count() const { return static_cast<int>(target.size()); }
};

class Network : public EventTarget {
 public:
  // Throws ConfigError with the estimate when the run would need more memory than the
  // machine has available (estimate_memory), before allocating it.
  Network(const Topology& topology, const SimConfig& config, Workload workload);
  // What a run holds, roughly: the routing tables (a slot and at least one candidate port
  // per node and routing destination, RouteColumns), then the ports and the workload's steps.
  struct MemoryEstimate {
    double routes, total;  // bytes
    int destinations;      // routing columns
    int routed_nodes;      // nodes with a table (more than one link)
  };
  static MemoryEstimate estimate_memory(const Topology& topology, const Workload& workload, const RouteColumns& columns);
  // The checks of a fabric and a finalized configuration that need no workload: the memory
  // of the routing tables and ports, each switch's buffer against its ports' PFC headroom,
  // what the flow-level mode models. The constructor runs them (with the workload's steps in
  // the estimate); a caller runs them first to refuse a run before building its workload.
  // Throws ConfigError.
  static void check_setup(const Topology& topology, const SimConfig& config, const Workload& workload);
  // The same with the topology's route columns already made.
  static void check_setup(const Topology& topology, const SimConfig& config, const Workload& workload,
                          const RouteColumns& columns);
  ~Network() override;

  // Runs until every agent finished or the time limit; `progress` prints simulated time
  // and events/s while running. Returns true when every agent finished.
  bool run(bool progress = false);

  const Topology& topology() const { return topo_; }
  const SimConfig& config() const { return cfg_; }
  const Workload& workload() const { return work_; }
  const std::vector<Port, HugePageAllocator<Port>>& ports() const { return ports_; }
  // The most bytes a node held at once (shared buffer and PFC headroom together).
  std::int64_t buffer_peak(int node) const { return buffer_peak_[static_cast<std::size_t>(node)]; }
  const std::vector<FlowRecord>& flows() const { return agents_.flows(); }
  const std::vector<PfcEvent>& pfc_events() const { return pfc_events_; }
  const std::vector<QueueSample>& queue_samples() const { return samplers_.queues(); }
  const std::vector<CounterSample>& counter_samples() const { return samplers_.counters(); }
  const std::vector<QpSample>& qp_samples() const { return samplers_.qps(); }
  const std::vector<QueuePair, HugePageAllocator<QueuePair>>& qps() const { return qps_; }
  int gpu_rank_of(int node) const { return gpu_rank_of_node_[static_cast<std::size_t>(node)]; }
  // The completion time of `bytes` from GPU rank src to dst on an idle fabric: each hop's
  // first-packet store and forward and propagation, the rest at the slowest link of the
  // path (the first of its equal-cost choices); 0 without a route.
  Time ideal_fct(int src_gpu, int dst_gpu, std::int64_t bytes) const;
  // The ports a packet from GPU rank src to dst leaves by: each hop's ECMP choice for
  // `probe`'s 5-tuple, or without one the first of the equal-cost ports; empty without a
  // route (or for src == dst).
  std::vector<int> path(int src_gpu, int dst_gpu, const Packet* probe = nullptr) const;
  // The ports a packet of queue pair `qp` leaves by under ECMP (its 5-tuple's choices).
  std::vector<int> qp_path(int qp) const;
  const Counters& counters() const { return counters_; }
  Time finish_time() const { return finish_; }
  std::uint64_t events_run() const { return events_run_; }
  // Threads the run used (sim.threads; one where the run's model needs one, see run()).
  int threads() const { return static_cast<int>(shards_.size()); }
  // The longest time window of the parallel engine: the smallest delay of a link between
  // nodes that are not joined by links without delay.
  Time window() const { return window_; }
  // Time windows run, and of them those the threads ran side by side (the others, holding
  // few events, one thread ran shard after shard).
  std::uint64_t windows() const { return windows_; }
  std::uint64_t windows_side_by_side() const { return windows_side_by_side_; }
  // The events each thread's nodes ran (the partition's balance: the run takes about as long
  // as its busiest thread).
  std::vector<std::uint64_t> events_per_thread() const;
  // Why the run used one thread where more were asked for (empty otherwise).
  const std::string& single_thread_reason() const { return single_thread_reason_; }
  // The flow-level mode's rate computations, and the parts they set in all.
  std::uint64_t fluid_rounds() const { return flow_.rounds(); }
  std::uint64_t fluid_parts_recomputed() const { return flow_.parts_recomputed(); }
  double wall_seconds() const { return wall_seconds_; }
  // The most packets alive at the end of a time window (the same for any number of threads).
  std::size_t peak_packets() const { return peak_packets_; }
  // Start and end of each collective (kNever when it did not run or finish).
  const std::vector<std::pair<Time, Time>>& collective_times() const { return collective_times_; }
  std::string port_name(int port) const;  // "rail-0->spine-1"
  int agents_unfinished() const;
  // What the unfinished ranks waited on at the end, and the deadlock cycles (stall.h);
  // empty when every rank finished.
  const Stall& stall() const { return stall_; }
  int pxn_relays() const { return pxn_relays_; }

  // Captures the frames sent on a link (both directions) into a pcap file.
  void capture(const std::string& node_a, const std::string& node_b, const std::string& pcap_path);

  void on_event(std::uint32_t kind, std::uint64_t arg) override;
  void prefetch(std::uint32_t kind, std::uint64_t arg, int stage) const override;

 private:
  // The parallel engine. Nodes are shared out among threads (shards); each shard runs the
  // events of its nodes from its own queue, in time windows no longer than the smallest
  // delay of a link between nodes not joined by links without delay (those share a
  // shard): nothing a node does reaches another shard's node sooner, so the shards run a
  // window side by side and swap what they sent each other at its end. Events run by
  // (time, key), the key being the scheduling node's number and its count of events
  // scheduled, and every random draw comes from the drawing node's own streams, so a run
  // is the same for any number of threads. Events that act on the whole fabric (samples,
  // failures, rerouting, the flow-level mode's rates) run between windows, after the
  // nodes' events of their time. Each shard keeps its own counters and logs, merged at
  // the end.
  struct Mail {
    Time at;
    std::uint64_t key;
    std::uint64_t arg;
    std::uint32_t kind;
    std::int32_t node;
  };
  struct Echo {
    Time sent_at = 0;             // when the packet being received was sent
    bool ce = false;              // whether it arrived CE-marked (NSCC)
    IntStack stamps;              // HPCC: its telemetry
  };
  struct Shard {
    int index = 0;                // its packet store and place in shards_ (the coordinator: the last store)
    EventQueue queue;
    Counters counters;
    Echo echo;                    // what an ACK sent in answer echoes
    std::vector<PfcEvent> pfc_events;
    std::unordered_map<std::uint64_t, std::pair<int, Time>> flowlets;  // (node, qp) -> port, last packet
    std::vector<std::pair<Time, Time>> collective_times;
    Time finish = 0;              // when its last rank finished
    int agents_done = 0;
    std::vector<std::vector<Mail>> outbox;  // per shard: events for its nodes, delivered at the window's end
  };
  // A node's random streams: its switch's or NIC's arbitration draws (spraying, adaptive
  // routing ties, ECN marks), its links' jitter, and its links' frame losses.
  struct RandomStream {  // SplitMix64: eight bytes a stream, for three streams a node
    using result_type = std::uint64_t;
    std::uint64_t state = 0;
    static constexpr result_type min() { return 0; }
    static constexpr result_type max() { return ~result_type{0}; }
    result_type operator()() {
      std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      return z ^ (z >> 31);
    }
  };
  struct NodeRng {
    RandomStream choice, jitter, loss;
  };
  static inline thread_local Shard* current_ = nullptr;
  Shard& sh() const { return *current_; }
  Time clock() const { return current_->queue.now(); }
  static Time after(Time t) { return t == kNever ? kNever : t + 1; }  // the end of a window that takes in time t
  // Schedules an event on `node` (-1: the whole fabric's, run between windows).
  void schedule(Time at, int node, std::uint32_t kind, std::uint64_t arg = 0);
  void share_nodes(int threads);      // node_shard_: a balanced cut of the fabric
  void begin_run();                   // the threads, shards, and the first events
  std::vector<Shard*> all_shards() {
    std::vector<Shard*> all{&coord_};
    for (auto& s : shards_) all.push_back(s.get());
    return all;
  }
  bool ran_ = false;
  void run_window(Shard& s);
  void deliver_mail(Shard& s);
  void merge_shards();                // counters_, pfc_events_, collective_times_, finish_
  std::vector<std::unique_ptr<Shard>> shards_;
  Shard coord_;                       // the events between windows, and set-up
  std::vector<int> node_shard_;
  std::vector<int> atom_;             // per node: the first node of those joined to it without delay
  std::vector<std::uint64_t> seq_;    // per node + 1: events it scheduled (index 0: the coordinator)
  std::vector<NodeRng> rng_;          // per node
  Time window_ = 0;                   // the longest window: the smallest delay between atoms
  Time window_end_ = kNever;          // the running window's end (one thread: cut by a fabric event)
  Time end_time_ = 0;
  std::uint64_t events_run_ = 0;
  std::uint64_t windows_ = 0, windows_side_by_side_ = 0;
  std::size_t peak_packets_ = 0;
  std::string single_thread_reason_;
  enum Event : std::uint32_t {
    kTxDone, kArrive, kPauseExpire, kPauseRefresh, kEndpointWake, kRto, kAlphaTimer, kRateTimer, kStepStart,
    kSample, kFailure, kReroute, kFluidUpdate, kFluidDelivered, kFluidAcked, kMessageReady
  };

  // fabric.cpp
  void build_ports();
  void compute_routes();
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
  void try_send(int port);
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
  // A port's class queue, whichever way the switch queues (queuing=output or voq): the
  // packet's entry, the next packet out (requires P.holds(q)) and its removal; the byte
  // counts of the class (Port::queue_bytes) are the caller's.
  const VirtualOutputQueues* voq_of(int port, int q) const {
    return voqs_.empty() || topo_.nodes[static_cast<std::size_t>(ports_[static_cast<std::size_t>(port)].node)].kind != NodeKind::kSwitch
               ? nullptr : &voqs_[static_cast<std::size_t>(port) * 8 + static_cast<std::size_t>(q)];
  }
  VirtualOutputQueues* voq_of(int port, int q) {
    return const_cast<VirtualOutputQueues*>(static_cast<const Network*>(this)->voq_of(port, q));
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
  void drop(std::uint32_t id);
  bool node_is_endpoint(int node) const { return topo_.nodes[node].kind == NodeKind::kGpu; }
  std::uint32_t hash_tuple(int node, const Packet& p) const;
  void sample_queues();

  // rdma.cpp
  // A message of `bytes` is cut into MTU packets over up to rdma.qps QPs of its connection:
  // how many parts, and f(i, packets, bytes) for each part i.
  std::int64_t packets_of(std::int64_t bytes) const { return std::max<std::int64_t>(1, (bytes + cfg_.mtu - 1) / cfg_.mtu); }
  int parts_of(std::int64_t bytes) const {
    return static_cast<int>(std::min<std::int64_t>(cfg_.qps_per_connection, packets_of(bytes)));
  }
  template <class F>
  void for_each_part(std::int64_t bytes, F&& f) const {
    const std::int64_t packets = packets_of(bytes);
    const int parts = parts_of(bytes);
    std::int64_t given = 0;
    for (int i = 0; i < parts; ++i) {
      const std::int64_t pk = packets / parts + (i < packets % parts ? 1 : 0);
      const std::int64_t part_bytes = i + 1 == parts ? bytes - given : std::min(bytes - given, pk * cfg_.mtu);
      given += part_bytes;
      f(i, pk, part_bytes);
    }
  }
  int qp_for(int src_agent, int dst_agent, int part);
  void post_message(int flow, int src_agent, int dst_agent, std::int64_t bytes);
  void activate(int qp);
  bool qp_has_data(const QueuePair& q) const;
  std::uint32_t make_data_packet(int qp);
  std::uint32_t endpoint_pull(int node, int port);
  void endpoint_receive(std::uint32_t id);
  void receive_data(QueuePair& q, int qp, const Packet& p);
  void receive_ack(QueuePair& q, int qp, const Packet& p, bool nak);
  void receive_cnp(QueuePair& q, int qp);
  // Window congestion control: HPCC's switches stamp a data packet as it leaves (int_of);
  // an ACK echoes the stamps and the send time of the packet it answers (echo_); the
  // sender's window and pacing follow (window_cc.h).
  bool window_cc() const {
    return cfg_.cc == CongestionControl::kHpcc || cfg_.cc == CongestionControl::kSwift || cfg_.cc == CongestionControl::kNscc;
  }
  IntStack& int_of(std::uint32_t id);
  void window_on_ack(QueuePair& q, const Packet& ack, std::uint32_t newly_acked);
  void window_on_loss(QueuePair& q, bool lost);  // lost: trimmed or timed out, not a sequence NAK
  bool window_full(const QueuePair& q) const;
  void window_set(QueuePair& q, double window, double pacing_bps);
  HpccParams hpcc_params(const QueuePair& q) const;
  SwiftParams swift_params(const QueuePair& q) const;
  NsccParams nscc_params(const QueuePair& q) const;
  void send_control(int from, int to, int qp, PacketType type, std::uint32_t psn, std::uint32_t trimmed_psn = ~0u);
  // Packet trimming: cuts a lossy data packet's payload and moves it to the CNP queue;
  // false when it cannot be trimmed (not data, or already trimmed).
  bool trim(Packet& p);
  void rto_check(int qp);
  void alpha_timer(int qp);
  void rate_timer(int qp, std::uint32_t epoch);
  void rate_increase(QueuePair& q);
  double line_rate(int node) const;

  int pxn_relays_ = 0;  // (sender, receiver) pairs relayed through an NVLink peer

  const Topology& topo_;
  SimConfig cfg_;
  Workload work_;
  PacketPool pool_;
  std::vector<Port, HugePageAllocator<Port>> ports_;
  std::vector<std::vector<int>> node_ports_;
  std::vector<int> port_slot_;            // per port: its index in its node's node_ports_
  std::vector<VirtualOutputQueues> voqs_;  // queuing=voq: per port x class (switch ports only)
  std::vector<int> link_port_;           // link -> its port at end a (peer is end b)
  // Routes (routes_to) are kept per column, not per GPU: a GPU with one link, to a switch, is reached
  // through that switch (its anchor) from everywhere else, so every GPU under one switch
  // shares the column routed toward the switch; other GPUs have a column of their own.
  // route_pool_[route_slots_[r * C + c].begin + i] for i < its count, C columns, r the node's
  // row (nodes with one link keep none: everything leaves by that link).
  RouteColumns columns_;
  std::vector<std::int32_t> anchor_port_;  // per GPU rank: its anchor's port to it (-1: none)
  std::vector<std::uint8_t> port_up_;      // per port: Port::up, packed (read by every route)
  std::uint32_t route_generation_ = 1;  // bumped when routes or links change (QueuePair::route_port)
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
  // The equal-cost port for hash h among c[0..n): uniform, or by speed (ecmp.weighted).
  int ecmp_pick(const std::int32_t* c, int n, std::uint32_t h) const;
  void reroute();
  // Endpoints.
  std::vector<QueuePair, HugePageAllocator<QueuePair>> qps_;
  std::unordered_map<std::uint64_t, int> qp_index_;
  std::vector<std::vector<int>> active_qps_;   // per GPU node
  std::vector<std::size_t> rr_qp_;              // per GPU node: round-robin cursor
  std::vector<int> qps_created_;                // per GPU node
  // The agents (agents.h): what the workload's ranks do, and the flow records.
  friend class Agents;
  Agents agents_;
  // The flow-level mode (flow_transport.h).
  friend class FlowTransport;
  FlowTransport flow_;
  std::vector<std::pair<Time, Time>> collective_times_;
  int agents_left_ = 0;  // ranks with steps not yet done (counted between windows)
  Stall stall_;
  friend Stall find_stall(const Network& net, bool time_limit);
  // Outputs (merged from the shards at the end of the run).
  Counters counters_;
  std::vector<PfcEvent> pfc_events_;
  Samplers samplers_;  // an observer (samplers.h)
  Time finish_ = 0;
  double wall_seconds_ = 0;
  LinkCapture capture_;
  // The length of the message a First or Only packet starts, from its sender's messages not
  // yet acknowledged (a late duplicate of an acknowledged message: its own payload).
  std::int64_t message_bytes(const Packet& p) const;
};

}  // namespace weft::sim
