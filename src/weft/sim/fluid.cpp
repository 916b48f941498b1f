#include "weft/sim/flow_transport.h"

#include <algorithm>
#include <cmath>

#include "weft/sim/agents.h"
#include "weft/sim/fabric.h"
#include "weft/sim/nic.h"
#include "weft/util/error.h"

namespace weft::sim {

FlowTransport::FlowTransport(Engine& engine, Fabric& fabric, Nic& nic, Agents& agents, const Topology& topo, const SimConfig& cfg)
    : eng_(engine), fabric_(fabric), nic_(nic), agents_(agents), topo_(topo), cfg_(cfg) {
  kUpdate = eng_.add_kind(this, [](void* f, std::uint64_t arg) { static_cast<FlowTransport*>(f)->update(static_cast<std::uint32_t>(arg)); });
  kDelivered = eng_.add_kind(this, [](void* f, std::uint64_t arg) { static_cast<FlowTransport*>(f)->delivered(static_cast<int>(arg)); });
  kAcked = eng_.add_kind(this, [](void* f, std::uint64_t arg) { static_cast<FlowTransport*>(f)->agents_.message_acked(static_cast<int>(arg)); });
}

double FlowTransport::payload_rate(int port) const {
  const double frame = static_cast<double>(cfg_.mtu + kHeaderBytes + kWireOverhead);
  return fabric_.ports()[static_cast<std::size_t>(port)].bps / 8 * static_cast<double>(cfg_.mtu) / frame;
}

void FlowTransport::prepare() {
  port_payload_rate_.resize(fabric_.ports().size());
  for (std::size_t port = 0; port < fabric_.ports().size(); ++port) port_payload_rate_[port] = payload_rate(static_cast<int>(port));
}

void FlowTransport::settle(Time until) {
  if (fluid_) fluid_->settle_all(until);
}

void FlowTransport::post(int flow, int src_agent, int dst_agent, std::int64_t bytes, int parts) {
  if (!fluid_)
    fluid_ = std::make_unique<FluidModel>(port_payload_rate_, cfg_.flow_tolerance, [this](int part, double bytes_moved) { moved(part, bytes_moved); });
  const FlowRecord& f = agents_.flows()[static_cast<std::size_t>(flow)];
  std::int64_t given = 0;
  for (int i = 0; i < parts; ++i) {
    const std::int64_t part_bytes = i + 1 == parts ? bytes - given : bytes / parts;
    given += part_bytes;
    // The path a packet of this part's QP takes: each hop's ECMP choice for its 5-tuple.
    const std::vector<int> hops = nic_.path_of(nic_.qp_for(src_agent, dst_agent, i));
    if (hops.empty())
      throw ConfigError("flow mode: no route from " + topo_.nodes[static_cast<std::size_t>(topo_.gpus[static_cast<std::size_t>(f.src_gpu)])].name +
                        " to " + topo_.nodes[static_cast<std::size_t>(topo_.gpus[static_cast<std::size_t>(f.dst_gpu)])].name);
    PartInfo info;
    info.flow = flow;
    const std::int64_t frame = kHeaderBytes + kRethBytes + std::min<std::int64_t>(part_bytes, cfg_.mtu);
    Time slowest_ser = 0;
    for (int port : hops) {
      const Port& P = fabric_.ports()[static_cast<std::size_t>(port)];
      info.latency += P.delay + serialization(frame, P.bps);
      info.ack_latency += fabric_.ports()[static_cast<std::size_t>(P.peer)].delay + serialization(kAckFrame, P.bps);
      slowest_ser = std::max(slowest_ser, serialization(frame, P.bps));
    }
    info.latency -= slowest_ser;
    const int id = fluid_->add(hops.data(), hops.size(), static_cast<double>(part_bytes), eng_.now());
    if (static_cast<std::size_t>(id) >= info_.size()) info_.resize(static_cast<std::size_t>(id) + 1);
    info_[static_cast<std::size_t>(id)] = info;
  }
  // The new parts change the rates now (or, with flow.batch, once the changes within that
  // time have come): an update pending later, for the next completion, gives way to it.
  schedule_update(eng_.now() + cfg_.flow_batch);
}

void FlowTransport::schedule_update(Time at) {
  if (update_pending_ && update_at_ <= at) return;
  update_pending_ = true;
  update_at_ = at;
  eng_.schedule(at, -1, kUpdate, ++epoch_);
}

// What a part moved, counted on every port of its path.
void FlowTransport::moved(int part, double moved) {
  const double wire = static_cast<double>(cfg_.mtu + kHeaderBytes + kWireOverhead) / static_cast<double>(cfg_.mtu);
  const auto bytes = static_cast<std::int64_t>(std::llround(moved));
  const auto on_wire = static_cast<std::int64_t>(std::llround(moved * wire));
  const std::int32_t* hops = fluid_->path(part);
  for (std::uint32_t i = 0; i < fluid_->path_length(part); ++i) {
    Port& P = fabric_.ports()[static_cast<std::size_t>(hops[i])];
    P.tx_payload += bytes;
    P.tx_bytes += on_wire;
  }
  Engine::shard().counters.bytes_sent += bytes;
}

void FlowTransport::update(std::uint32_t epoch) {
  if (epoch != epoch_) return;  // a later change rescheduled it
  update_pending_ = false;
  const Time now = eng_.now();
  const int done = fluid_->complete(now, [&](int part) {
    const PartInfo info = info_[static_cast<std::size_t>(part)];
    eng_.schedule(now + info.latency, -1, kDelivered, static_cast<std::uint64_t>(info.flow));
    eng_.schedule(now + info.latency + info.ack_latency, -1, kAcked, static_cast<std::uint64_t>(info.flow));
    agents_.message_sent(info.flow);
  });
  if (done > 0) {
    // What the completions start at this same time (the next steps' sends) joins before the
    // rates are computed: once, after them.
    schedule_update(now);
    return;
  }
  fluid_->recompute(now);
  if (const Time next = fluid_->next_finish(); next != kNever) schedule_update(next);
}

void FlowTransport::delivered(int flow) {
  FlowRecord& f = agents_.flows()[static_cast<std::size_t>(flow)];
  // Parts are equal but the last, which takes the rest: whichever arrives last credits it.
  const std::int64_t bytes = f.parts_left_rx == 1 ? f.bytes - f.delivered_bytes : f.bytes / f.parts;
  f.delivered_bytes += bytes;
  Engine::shard().counters.bytes_delivered += bytes;
  agents_.message_delivered(flow);
}

}  // namespace weft::sim
