// A RoCEv2 reliable-connection queue pair of the simulated NIC: the sender's messages and
// PSNs, the receiver's expected PSN and messages, the DCQCN reaction point, the window
// congestion controls' state (window_cc.h) and the counters its samples read.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <vector>

#include "weft/sim/packet.h"
#include "weft/sim/window_cc.h"

namespace weft::sim {

// One message (part) on a queue pair.
struct QpMessage {
  std::uint32_t psn_begin = 0, psn_end = 0;  // [begin, end)
  std::int64_t bytes = 0;
  int flow = -1;
};

// The message of `messages` (in PSN order) that holds `psn`; null when none does. The first
// and the last are asked first: a receiver's next PSN is nearly always in its oldest message,
// a sender's in its newest, and a queue pair's list can hold every message of a long run.
inline const QpMessage* message_holding(const std::deque<QpMessage>& messages, std::uint32_t psn) {
  if (messages.empty() || psn < messages.front().psn_begin) return nullptr;
  if (psn < messages.front().psn_end) return &messages.front();
  if (psn >= messages.back().psn_begin) return psn < messages.back().psn_end ? &messages.back() : nullptr;
  auto it = std::upper_bound(messages.begin(), messages.end(), psn,
                             [](std::uint32_t v, const QpMessage& m) { return v < m.psn_begin; });
  return psn < (it - 1)->psn_end ? &*(it - 1) : nullptr;
}

struct QueuePair {
  int src = -1, dst = -1;   // GPU node ids
  int src_agent = -1, dst_agent = -1;
  std::uint16_t sport = 0;
  std::uint8_t queue = 3, dscp = 24;  // traffic class of its packets and ACKs
  // Sender.
  std::deque<QpMessage> unacked;   // messages not yet fully acknowledged
  std::uint32_t psn_assigned = 0;  // next PSN to give a new message
  std::uint32_t psn_planned = 0;   // (set-up: the receiver's list of messages, rx)
  std::uint32_t snd_nxt = 0, snd_una = 0, snd_max = 0;
  std::vector<std::uint32_t> retransmit;  // selective repeat: PSNs to resend first
  Time next_send = 0;
  Time last_sent = 0;     // when its latest packet was made (pacing)
  Time last_progress = 0;
  bool rto_armed = false;
  bool active = false;
  int flowlet_port = -1;
  Time flowlet_last = 0;
  // The port its packets leave by while the routes stay as they were at route_generation
  // (Network::fixed_port).
  std::uint32_t route_generation = 0;
  int route_port = -1;
  // DCQCN reaction point (rate 0: not rate limited).
  double rate = 0, target = 0, alpha = 1;
  std::int64_t byte_counter = 0;
  int t_stage = 0, b_stage = 0;
  bool cnp_since_alpha = false;
  bool cc_timers = false;
  std::uint32_t rate_epoch = 0;      // stale rate-timer events carry an older epoch
  // Receiver.
  std::uint32_t epsn = 0;
  std::vector<std::uint32_t> ahead;  // PSNs received ahead of epsn (sorted)
  std::deque<QpMessage> rx;          // messages not yet delivered
  int since_ack = 0;
  std::uint32_t nak_for = ~0u;
  std::uint32_t msn = 0;             // messages completed (the MSN its ACKs carry)
  // Time series (sample.qps): totals, and the totals at the last sample.
  std::int64_t delivered_bytes = 0, cnps_received = 0;
  std::int64_t sampled_delivered = 0, sampled_cnps = 0;
  Time last_cnp = 0;
  bool cnp_sent_once = false;
  // Window congestion control (window_cc.h): bytes that may be unacknowledged (0: no
  // window), the state of HPCC or Swift, and the switches on the QP's path.
  double window = 0;
  HpccState hpcc;
  SwiftState swift;
  NsccState nscc;
  int hops = 0;
  Time path_rtt = 0;      // the path's idle round trip (Swift's target and NSCC's first base over it)
};

}  // namespace weft::sim
