// One simulation run: the composition of the simulator's parts, each in files of its own
// with its own arrays, calling each other directly (no virtual call on a packet's path):
//
//   parallel_engine.h  the engine: shards, time windows, mail, scheduling, the event-kind table
//   fabric.h           ports, routes, load balancing, buffers, PFC, ECN, failures (fabric.cpp)
//   nic.h              queue pairs, DCQCN, the window controls (rdma.cpp, window_cc.h)
//   agents.h           the workload's ranks: steps, message matching, the flow records
//   flow_transport.h   the flow-level mode, instead of the NIC's packets (fluid.cpp)
//   samplers.h, link_capture.h, stall.h   observers: samples over time, pcap, why a run stalled
//
// Beside them: report.cpp (summary, JSON/CSV outputs), pxn.cpp (PXN relays), in_network.cpp
// (in-network reduction). Network wires the parts, runs them once and keeps the outcome.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "weft/sim/agents.h"
#include "weft/sim/config.h"
#include "weft/sim/fabric.h"
#include "weft/sim/flow_transport.h"
#include "weft/sim/nic.h"
#include "weft/sim/packet.h"
#include "weft/sim/parallel_engine.h"
#include "weft/sim/samplers.h"
#include "weft/sim/stall.h"
#include "weft/sim/topology.h"
#include "weft/sim/workload.h"

namespace weft::sim {

class Network {
 public:
  // Throws ConfigError for a run that cannot be set up (check_setup, the workload's ranks,
  // failures on unknown nodes), before allocating what it would need.
  Network(const Topology& topology, const SimConfig& config, Workload workload);
  // The checks that need no workload built (Fabric::check_setup); the constructor runs them,
  // a caller runs them first to refuse a run before building its workload.
  static void check_setup(const Topology& topology, const SimConfig& config, const Workload& workload);

  // Runs until every agent finished or the time limit; `progress` prints simulated time
  // and events/s while running. Returns true when every agent finished. Once.
  bool run(bool progress = false);
  // Captures the frames sent on a link (both directions) into a pcap file.
  void capture(const std::string& node_a, const std::string& node_b, const std::string& pcap_path);

  // The parts, and what the run holds.
  const Fabric& fabric() const { return fabric_; }
  const Agents& agents() const { return agents_; }
  const PacketPool& packets() const { return pool_; }
  const Topology& topology() const { return topo_; }
  const SimConfig& config() const { return cfg_; }
  const Workload& workload() const { return work_; }
  const std::vector<Port, HugePageAllocator<Port>>& ports() const { return fabric_.ports(); }
  const std::vector<QueuePair, HugePageAllocator<QueuePair>>& qps() const { return nic_.qps(); }
  std::int64_t buffer_peak(int node) const { return fabric_.buffer_peak(node); }  // shared and headroom at once
  int gpu_rank_of(int node) const { return fabric_.gpu_rank_of(node); }
  Time ideal_fct(int src_gpu, int dst_gpu, std::int64_t bytes) const { return fabric_.ideal_fct(src_gpu, dst_gpu, bytes); }
  std::vector<int> qp_path(int qp) const { return nic_.path_of(qp); }
  std::string port_name(int port) const { return fabric_.port_name(port); }

  // The outcome (after run).
  const std::vector<FlowRecord>& flows() const { return agents_.flows(); }
  const std::vector<PfcEvent>& pfc_events() const { return pfc_events_; }
  const std::vector<QueueSample>& queue_samples() const { return samplers_.queues(); }
  const std::vector<CounterSample>& counter_samples() const { return samplers_.counters(); }
  const std::vector<QpSample>& qp_samples() const { return samplers_.qps(); }
  const Counters& counters() const { return counters_; }
  Time finish_time() const { return finish_; }
  // Start and end of each collective (kNever when it did not run or finish).
  const std::vector<std::pair<Time, Time>>& collective_times() const { return collective_times_; }
  int agents_unfinished() const { return agents_left_; }
  // What the unfinished ranks waited on at the end, and the deadlock cycles (stall.h);
  // empty when every rank finished.
  const Stall& stall() const { return stall_; }
  int pxn_relays() const { return pxn_relays_; }
  double wall_seconds() const { return wall_seconds_; }

  // The engine's figures: events, threads (sim.threads; one where the run's model needs
  // one), windows (and of them those the threads ran side by side), the events of each
  // thread's nodes, the most packets alive at the end of a window (the same for any number of
  // threads), the flow-level mode's rate computations and the parts they set in all.
  std::uint64_t events_run() const { return engine_.events_run(); }
  int threads() const { return engine_.threads(); }
  const std::string& single_thread_reason() const { return single_thread_reason_; }
  Time window() const { return engine_.window(); }
  std::uint64_t windows() const { return engine_.windows(); }
  std::uint64_t windows_side_by_side() const { return engine_.windows_side_by_side(); }
  std::vector<std::uint64_t> events_per_thread() const { return engine_.events_per_thread(); }
  std::size_t peak_packets() const { return peak_packets_; }
  std::uint64_t fluid_rounds() const { return flow_.rounds(); }
  std::uint64_t fluid_parts_recomputed() const { return flow_.parts_recomputed(); }

 private:
  int begin_run();  // the threads, the parts' per-thread state and first events; returns the threads
  void sample();    // the samplers' event

  int pxn_relays_ = 0;  // (sender, receiver) pairs relayed through an NVLink peer (before cfg_: the workload changes)
  const Topology& topo_;
  Workload work_;
  SimConfig cfg_;
  Engine engine_;
  PacketPool pool_;
  Fabric fabric_;
  Nic nic_;
  FlowTransport flow_;
  Agents agents_;
  Samplers samplers_;
  std::uint32_t kSample_ = 0;
  std::uint64_t events_at_sample_ = 0;  // events run as the previous sample was taken
  int agents_left_ = 0;  // ranks with steps not yet done (counted between windows)
  std::string single_thread_reason_;
  std::size_t peak_packets_ = 0;
  // The outcome, merged from the parts' threads at the end of the run.
  Counters counters_;
  std::vector<PfcEvent> pfc_events_;
  std::vector<std::pair<Time, Time>> collective_times_;
  Time finish_ = 0;
  double wall_seconds_ = 0;
  Stall stall_;
};

}  // namespace weft::sim
