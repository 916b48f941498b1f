// The flow-level mode (mode = flow): messages as fluid flows at max-min fair rates over
// their paths instead of packets, for fabrics and iterations too large to simulate packet
// by packet. A message part takes its ECMP path (the switches' hash of its 5-tuple, as a
// packet of it would); whenever the set of flows changes the rates are recomputed over
// every link's payload rate (max_min.h), and each flow advances at its rate until the next
// change. A part is on the wire when its last byte leaves the fluid, delivered a path's
// latency later (each hop's propagation and one packet's store and forward, but the
// bottleneck's, which the fluid already counts), acknowledged an ACK's return later. No
// queues, no PFC, no ECN, no congestion control: the rates are what an ideal congestion
// control would settle on, at once.
#include <algorithm>
#include <cmath>

#include "weft/sim/max_min.h"
#include "weft/sim/network.h"
#include "weft/util/error.h"

namespace weft::sim {

double Network::payload_rate(int port) const {
  const double frame = static_cast<double>(cfg_.mtu + kHeaderBytes + kWireOverhead);
  return ports_[static_cast<std::size_t>(port)].bps / 8 * static_cast<double>(cfg_.mtu) / frame;
}

void Network::fluid_post(int flow, int src_agent, int dst_agent, std::int64_t bytes, int parts) {
  const FlowRecord& f = flows_[static_cast<std::size_t>(flow)];
  std::int64_t given = 0;
  for (int i = 0; i < parts; ++i) {
    const std::int64_t part_bytes = i + 1 == parts ? bytes - given : bytes / parts;
    given += part_bytes;
    const int qp = qp_for(src_agent, dst_agent, i);
    // The path a packet of this QP takes: each hop's ECMP choice for its 5-tuple.
    Packet probe;
    probe.src = topo_.gpus[static_cast<std::size_t>(f.src_gpu)];
    probe.dst = topo_.gpus[static_cast<std::size_t>(f.dst_gpu)];
    probe.sport = qps_[static_cast<std::size_t>(qp)].sport;
    const std::vector<int> hops = path(f.src_gpu, f.dst_gpu, &probe);
    if (hops.empty())
      throw ConfigError("flow mode: no route from " + topo_.nodes[static_cast<std::size_t>(probe.src)].name + " to " +
                        topo_.nodes[static_cast<std::size_t>(probe.dst)].name);
    FluidPart part;
    part.flow = flow;
    part.remaining = static_cast<double>(part_bytes);
    part.start = clock();
    part.path_begin = static_cast<std::uint32_t>(fluid_path_.size());
    const std::int64_t frame = kHeaderBytes + kRethBytes + std::min<std::int64_t>(part_bytes, cfg_.mtu);
    Time slowest_ser = 0;
    for (int port : hops) {
      const Port& P = ports_[static_cast<std::size_t>(port)];
      fluid_path_.push_back(port);
      part.latency += P.delay + serialization(frame, P.bps);
      part.ack_latency += ports_[static_cast<std::size_t>(P.peer)].delay + serialization(kAckFrame, P.bps);
      slowest_ser = std::max(slowest_ser, serialization(frame, P.bps));
    }
    part.latency -= slowest_ser;
    part.path_len = static_cast<std::uint32_t>(fluid_path_.size() - part.path_begin);
    fluid_.push_back(part);
  }
  if (!fluid_update_pending_) {
    fluid_update_pending_ = true;
    schedule(clock(), -1, kFluidUpdate, ++fluid_epoch_);
  }
}

void Network::fluid_update(std::uint32_t epoch) {
  if (epoch != fluid_epoch_) return;  // a later change rescheduled it
  fluid_update_pending_ = false;
  const Time now = clock();
  const double dt = to_seconds(now - fluid_at_);
  fluid_at_ = now;
  // Advance every part at its rate; count what each link carried.
  const double wire = static_cast<double>(cfg_.mtu + kHeaderBytes + kWireOverhead) / static_cast<double>(cfg_.mtu);
  std::size_t kept = 0;
  bool completed = false;
  std::vector<std::int32_t> path;
  path.reserve(fluid_path_.size());
  for (FluidPart& part : fluid_) {
    const double moved = std::min(part.remaining, part.rate * dt);
    part.remaining -= moved;
    const auto bytes = static_cast<std::int64_t>(std::llround(moved));
    for (std::uint32_t i = 0; i < part.path_len; ++i) {
      Port& P = ports_[static_cast<std::size_t>(fluid_path_[part.path_begin + i])];
      P.tx_payload += bytes;
      P.tx_bytes += static_cast<std::int64_t>(std::llround(moved * wire));
    }
    sh().counters.bytes_sent += bytes;
    // Done when less than a picosecond's worth (or a byte) is left, or (flow.tolerance) when
    // what is left would take less than that fraction of the time it has been going: its
    // last bytes arrive early, by at most that fraction, and finishes close in time are
    // taken together.
    const double tolerance = cfg_.flow_tolerance * part.rate * to_seconds(now - part.start);
    if (part.remaining <= std::max({1.0, part.rate * 1e-12, tolerance})) {
      schedule(now + part.latency, -1, kFluidDelivered, static_cast<std::uint64_t>(part.flow));
      schedule(now + part.latency + part.ack_latency, -1, kFluidAcked, static_cast<std::uint64_t>(part.flow));
      message_sent(part.flow);
      completed = true;
      continue;
    }
    // Kept: its path moves to the front of the compacted pool.
    const std::uint32_t begin = static_cast<std::uint32_t>(path.size());
    path.insert(path.end(), fluid_path_.begin() + part.path_begin, fluid_path_.begin() + part.path_begin + part.path_len);
    part.path_begin = begin;
    fluid_[kept++] = part;
  }
  fluid_.resize(kept);
  fluid_path_.swap(path);
  if (completed) {
    // What the completions start at this same time (the next steps' sends) joins before the
    // rates are computed: once, after them.
    fluid_update_pending_ = true;
    schedule(now, -1, kFluidUpdate, ++fluid_epoch_);
    return;
  }
  ++fluid_rounds_;
  if (fluid_.empty()) return;
  // New rates, and the next completion.
  FlowPaths paths;
  paths.begin.reserve(fluid_.size() + 1);
  paths.resource.reserve(fluid_path_.size());
  for (const FluidPart& part : fluid_) paths.add(fluid_path_.data() + part.path_begin, part.path_len);
  const std::vector<double> rates = max_min_rates(paths, port_payload_rate_);
  double next = 1e300;
  for (std::size_t i = 0; i < fluid_.size(); ++i) {
    fluid_[i].rate = rates[i];
    next = std::min(next, fluid_[i].remaining / rates[i]);
  }
  const Time at = now + std::max<Time>(1, static_cast<Time>(std::ceil(next * 1e12)));
  fluid_update_pending_ = true;
  schedule(at, -1, kFluidUpdate, ++fluid_epoch_);
}

void Network::fluid_delivered(int flow) {
  FlowRecord& f = flows_[static_cast<std::size_t>(flow)];
  // Parts are equal but the last, which takes the rest: whichever arrives last credits it.
  const std::int64_t bytes = f.parts_left_rx == 1 ? f.bytes - f.delivered_bytes : f.bytes / f.parts;
  f.delivered_bytes += bytes;
  sh().counters.bytes_delivered += bytes;
  message_delivered(flow);
}

}  // namespace weft::sim
