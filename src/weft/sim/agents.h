// The agents of a workload (its ranks) as a part of the simulator: each runs its steps in
// order. A step starts after its compute gap, posts its sends and completes when every send
// went on the wire (or, with rdma.send_done=acked, is acknowledged) and every expected
// receive has arrived; messages from one agent to another match in order.
//
// The agents own the run's flow records: one per send that moves data, made before the run
// in the order of the ranks' steps (a record's start is kNever until posted; each receiving
// queue pair lists its messages in the order its sender will post them). They post messages
// through the NIC (nic.h) or, in the flow-level mode, the flow transport (flow_transport.h),
// and schedule their steps on the engine (parallel_engine.h), by direct calls; the NIC and
// the flow-level mode call back when a message is sent, delivered and acknowledged. What
// each thread of the engine finishes (its collectives' times, its ranks done) is kept per
// shard and added up after the run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "weft/sim/config.h"
#include "weft/sim/parallel_engine.h"
#include "weft/sim/packet.h"
#include "weft/sim/topology.h"
#include "weft/sim/workload.h"

namespace weft::sim {

class FlowTransport;
class Nic;

// One send that moves data: who to whom, its bytes, and when it was posted, delivered and
// acknowledged (kNever start: not posted yet); its parts left to count off on each side.
struct FlowRecord {
  int src_agent = -1, dst_agent = -1;
  int src_gpu = -1, dst_gpu = -1;  // GPU ranks
  std::int64_t bytes = 0;
  std::int64_t delivered_bytes = 0;  // payload accepted by the receiver so far
  Time start = 0, delivered = 0, acked = 0;
  int parts_left_rx = 0, parts_left_tx = 0, parts_left_sent = 0;
  int parts = 1;
  int collective = -1;
};

struct AgentState {
  std::size_t step = 0;
  int pending = 0;
  bool started = false, done = false, posting = false;
  Time step_began = 0;
  std::unordered_map<int, std::int64_t> arrived;  // messages arrived from peer, not yet matched
  std::unordered_map<int, std::int64_t> waiting;  // receives of the current step from peer
};

class Agents {
 public:
  Agents(Engine& engine, Nic& nic, FlowTransport& flow, const Topology& topo, const SimConfig& cfg, const Workload& work);
  // Checks the ranks' placement and peers (throws ConfigError), makes the flow records and
  // the receivers' message lists, and marks the ranks without steps done.
  void prepare();
  // Before the run (on the coordinator): the per-thread records, and the first step of every
  // rank at its start and gap.
  void begin(int shards);
  void step_start(int agent);
  // The NIC's and the flow-level mode's calls, per part of a message: once every part is in,
  // the message counts.
  void message_delivered(int flow);
  void message_ready(int flow);  // the receiving GPU sees the message (after its protocol's flag delay)
  void message_sent(int flow);
  void message_acked(int flow);
  // Ranks with steps, and each rank's state.
  int started() const { return started_; }
  const AgentState& state(int agent) const { return state_[static_cast<std::size_t>(agent)]; }
  std::size_t count() const { return state_.size(); }
  std::vector<FlowRecord>& flows() { return flows_; }
  const std::vector<FlowRecord>& flows() const { return flows_; }
  // After a run that did not finish: the records of sends never posted go.
  void drop_unposted();
  // Ranks done, when the last finished, each collective's start and end (kNever: did not
  // run), over every thread.
  int done() const;
  Time finish() const;
  std::vector<std::pair<Time, Time>> collective_times() const;

 private:
  void make_sends();
  void advance(int agent);
  void hears(int dst_agent, int src_agent);  // a message from src_agent is there for dst_agent
  void send_step_done(int agent);
  int node_of(int agent) const;
  void post(int flow, int src_agent, int dst_agent, std::int64_t bytes);

  Engine& eng_;
  Nic& nic_;
  FlowTransport& flow_;
  std::uint32_t kStepStart = 0, kMessageReady = 0;  // the engine's kinds
  struct PerThread {
    std::vector<std::pair<Time, Time>> collective_times;
    Time finish = 0;  // when its last rank finished
    int done = 0;     // its ranks done
  };
  std::vector<PerThread> per_thread_;  // by the engine's shard index
  PerThread& mine() { return per_thread_[static_cast<std::size_t>(Engine::shard().index)]; }
  const Topology& topo_;
  const SimConfig& cfg_;
  const Workload& work_;
  std::vector<AgentState> state_;
  // first_flow_[step_base_[a] + s] is the first record of rank a's step s.
  std::vector<FlowRecord> flows_;
  std::vector<std::size_t> step_base_;
  std::vector<int> first_flow_;
  int started_ = 0;
};

}  // namespace weft::sim
