// The flow-level mode (mode = flow): messages as fluid flows at max-min fair rates over
// their paths instead of packets, for fabrics and iterations too large to simulate packet
// by packet. A message part takes its ECMP path (the switches' hash of its 5-tuple, as a
// packet of it would); whenever a part starts or ends, the rates of the parts it shares
// links with (transitively) are recomputed over the links' payload rates (fluid_model.h),
// and each part advances at its rate until the next change. A part is on the wire when its
// last byte leaves the fluid, delivered a path's latency later (each hop's propagation and
// one packet's store and forward, but the bottleneck's, which the fluid already counts),
// acknowledged an ACK's return later. No queues, no PFC, no ECN, no congestion control: the
// rates are what an ideal congestion control would settle on, at once.
#include <algorithm>
#include <cmath>

#include "weft/sim/network.h"
#include "weft/util/error.h"

namespace weft::sim {

double Network::payload_rate(int port) const {
  const double frame = static_cast<double>(cfg_.mtu + kHeaderBytes + kWireOverhead);
  return ports_[static_cast<std::size_t>(port)].bps / 8 * static_cast<double>(cfg_.mtu) / frame;
}

void Network::fluid_post(int flow, int src_agent, int dst_agent, std::int64_t bytes, int parts) {
  if (!fluid_)
    fluid_ = std::make_unique<FluidModel>(port_payload_rate_, cfg_.flow_tolerance, [this](int part, double moved) { fluid_moved(part, moved); });
  const FlowRecord& f = agents_.flows()[static_cast<std::size_t>(flow)];
  std::int64_t given = 0;
  for (int i = 0; i < parts; ++i) {
    const std::int64_t part_bytes = i + 1 == parts ? bytes - given : bytes / parts;
    given += part_bytes;
    // The path a packet of this part's QP takes: each hop's ECMP choice for its 5-tuple.
    const std::vector<int> hops = qp_path(qp_for(src_agent, dst_agent, i));
    if (hops.empty())
      throw ConfigError("flow mode: no route from " + topo_.nodes[static_cast<std::size_t>(topo_.gpus[static_cast<std::size_t>(f.src_gpu)])].name +
                        " to " + topo_.nodes[static_cast<std::size_t>(topo_.gpus[static_cast<std::size_t>(f.dst_gpu)])].name);
    FluidPartInfo info;
    info.flow = flow;
    const std::int64_t frame = kHeaderBytes + kRethBytes + std::min<std::int64_t>(part_bytes, cfg_.mtu);
    Time slowest_ser = 0;
    for (int port : hops) {
      const Port& P = ports_[static_cast<std::size_t>(port)];
      info.latency += P.delay + serialization(frame, P.bps);
      info.ack_latency += ports_[static_cast<std::size_t>(P.peer)].delay + serialization(kAckFrame, P.bps);
      slowest_ser = std::max(slowest_ser, serialization(frame, P.bps));
    }
    info.latency -= slowest_ser;
    const int id = fluid_->add(hops.data(), hops.size(), static_cast<double>(part_bytes), clock());
    if (static_cast<std::size_t>(id) >= fluid_info_.size()) fluid_info_.resize(static_cast<std::size_t>(id) + 1);
    fluid_info_[static_cast<std::size_t>(id)] = info;
  }
  // The new parts change the rates now (or, with flow.batch, once the changes within that
  // time have come): an update pending later, for the next completion, gives way to it.
  fluid_schedule_update(clock() + cfg_.flow_batch);
}

void Network::fluid_schedule_update(Time at) {
  if (fluid_update_pending_ && fluid_update_at_ <= at) return;
  fluid_update_pending_ = true;
  fluid_update_at_ = at;
  schedule(at, -1, kFluidUpdate, ++fluid_epoch_);
}

// What a part moved, counted on every port of its path.
void Network::fluid_moved(int part, double moved) {
  const double wire = static_cast<double>(cfg_.mtu + kHeaderBytes + kWireOverhead) / static_cast<double>(cfg_.mtu);
  const auto bytes = static_cast<std::int64_t>(std::llround(moved));
  const auto on_wire = static_cast<std::int64_t>(std::llround(moved * wire));
  const std::int32_t* hops = fluid_->path(part);
  for (std::uint32_t i = 0; i < fluid_->path_length(part); ++i) {
    Port& P = ports_[static_cast<std::size_t>(hops[i])];
    P.tx_payload += bytes;
    P.tx_bytes += on_wire;
  }
  sh().counters.bytes_sent += bytes;
}

void Network::fluid_update(std::uint32_t epoch) {
  if (epoch != fluid_epoch_) return;  // a later change rescheduled it
  fluid_update_pending_ = false;
  const Time now = clock();
  const int done = fluid_->complete(now, [&](int part) {
    const FluidPartInfo info = fluid_info_[static_cast<std::size_t>(part)];
    schedule(now + info.latency, -1, kFluidDelivered, static_cast<std::uint64_t>(info.flow));
    schedule(now + info.latency + info.ack_latency, -1, kFluidAcked, static_cast<std::uint64_t>(info.flow));
    agents_.message_sent(info.flow);
  });
  if (done > 0) {
    // What the completions start at this same time (the next steps' sends) joins before the
    // rates are computed: once, after them.
    fluid_schedule_update(now);
    return;
  }
  fluid_->recompute(now);
  if (const Time next = fluid_->next_finish(); next != kNever) fluid_schedule_update(next);
}

void Network::fluid_delivered(int flow) {
  FlowRecord& f = agents_.flows()[static_cast<std::size_t>(flow)];
  // Parts are equal but the last, which takes the rest: whichever arrives last credits it.
  const std::int64_t bytes = f.parts_left_rx == 1 ? f.bytes - f.delivered_bytes : f.bytes / f.parts;
  f.delivered_bytes += bytes;
  sh().counters.bytes_delivered += bytes;
  agents_.message_delivered(flow);
}

}  // namespace weft::sim
