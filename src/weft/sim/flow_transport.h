// The flow-level mode (mode = flow) as a transport of its own, instead of the NIC's packets:
// messages as fluid flows at max-min fair rates over their paths, for fabrics and iterations
// too large to simulate packet by packet. A message part takes its ECMP path (the switches'
// hash of its 5-tuple, as a packet of it would); whenever a part starts or ends, the rates of
// the parts it shares links with (transitively) are recomputed over the links' payload rates
// (fluid_model.h), and each part advances at its rate until the next change. A part is on the
// wire when its last byte leaves the fluid, delivered a path's latency later (each hop's
// propagation and one packet's store and forward, but the bottleneck's, which the fluid
// already counts), acknowledged an ACK's return later. No queues, no PFC, no ECN, no
// congestion control: the rates are what an ideal congestion control would settle on, at
// once. It completes the agents' messages (agents.h) and counts the bytes on the fabric's
// ports (fabric.h), by direct calls; its events run on the engine's coordinator, between
// windows.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "weft/sim/config.h"
#include "weft/sim/fluid_model.h"
#include "weft/sim/packet.h"
#include "weft/sim/parallel_engine.h"
#include "weft/sim/topology.h"

namespace weft::sim {

class Agents;
class Fabric;
class Nic;

class FlowTransport {
 public:
  FlowTransport(Engine& engine, Fabric& fabric, Nic& nic, Agents& agents, const Topology& topo, const SimConfig& cfg);
  // The ports' payload rates (bytes/s of payload at full speed), once the ports are built.
  void prepare();
  // A message of `bytes` from one agent to another in `parts` (one per queue pair).
  void post(int flow, int src_agent, int dst_agent, std::int64_t bytes, int parts);
  void update(std::uint32_t epoch);  // the event that recomputes the rates (stale epochs ignored)
  void delivered(int flow);          // a part's last byte reached its receiver
  // At the end of a run that did not finish: every part's bytes up to `until` counted.
  void settle(Time until);
  std::uint64_t rounds() const { return fluid_ ? fluid_->recomputations() : 0; }
  std::uint64_t parts_recomputed() const { return fluid_ ? fluid_->parts_recomputed() : 0; }

 private:
  struct PartInfo {
    int flow = -1;
    Time latency = 0, ack_latency = 0;
  };
  double payload_rate(int port) const;
  void schedule_update(Time at);  // at `at` unless one is pending by then
  void moved(int part, double bytes);

  Engine& eng_;
  Fabric& fabric_;
  Nic& nic_;
  Agents& agents_;
  std::uint32_t kUpdate = 0, kDelivered = 0, kAcked = 0;  // the engine's kinds
  const Topology& topo_;
  const SimConfig& cfg_;
  std::unique_ptr<FluidModel> fluid_;
  std::vector<PartInfo> info_;  // by the fluid's part id
  std::vector<double> port_payload_rate_;
  std::uint32_t epoch_ = 0;
  bool update_pending_ = false;
  Time update_at_ = 0;
};

}  // namespace weft::sim
