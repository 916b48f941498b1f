// Window congestion control at an RDMA sender, driven by acknowledgements: what the
// transport (rdma.cpp) asks of a queue pair's window after each ACK, with no access to the
// network. Two algorithms, each a small state machine of its own:
//
//   HPCC  (Li et al., SIGCOMM 2019, algorithm 1): switches stamp each data packet with their
//         egress port's queue, transmitted bytes, time and speed (in-band telemetry); the
//         receiver echoes the stamps in its ACK; the window follows the most utilized hop,
//         W = Wc / (U / eta) + W_AI, or Wc + W_AI for up to max_stage rounds while U < eta.
//   Swift (Kumar et al., SIGCOMM 2020, algorithm 1): the ACK measures the round trip; below
//         the target delay (base + per hop + flow scaling) the window grows by ai packets per
//         round trip, above it shrinks by beta x (delay - target) / delay, at most max_mdf and
//         at most once per round trip.
//   NSCC  (Ultra Ethernet 1.0's network-signal congestion control): the queueing delay (the
//         round trip over the smallest one seen) and the ECN echo of each ACK pick one of four
//         moves: no mark and under the target delay, a proportional increase; no mark over
//         it, a fair (additive) increase; a mark over it, a multiplicative decrease by
//         gamma x (avg delay - target) / avg delay, at most once per base round trip; a mark
//         under it, nothing (another path's congestion: spraying moves on). A trimmed packet
//         or a loss takes its bytes off the window and triggers quick adapt: the window
//         falls to what was delivered in the last base round trip plus target.
//
// Contract: on_ack and friends only read their arguments and change the state they are
// given; `window` is in bytes, and `pacing_bps` (0: not paced) is the rate the sender spaces
// its packets at. A sender may have `window` bytes unacknowledged.
#pragma once

#include <cstdint>

#include "weft/sim/engine.h"
#include "weft/sim/packet.h"

namespace weft::sim {

struct HpccParams {
  double line_bps = 100e9;  // the sender's NIC
  double base_rtt_s = 10e-6;  // T: the initial window is line x T
  double eta = 0.95;        // target utilization
  int max_stage = 5;        // additive rounds before a multiplicative step
  double w_ai = 0;          // additive increase per round, bytes
};

struct HpccState {
  double window = 0, window_ref = 0;  // W and Wc, bytes
  double utilization = 0;             // U, smoothed over about one T
  int inc_stage = 0;
  std::uint32_t round_end = 0;        // the PSN whose ACK ends the current round
  IntStack last;                      // the previous ACK's stamps
  double pacing_bps = 0;
};

// The state of a new sender: a window of line x T (one bandwidth-delay product).
HpccState hpcc_start(const HpccParams& p);
// An ACK acknowledging up to `acked` (the next expected PSN) came with `stamps`; the sender
// has sent up to `snd_nxt`.
void hpcc_on_ack(const HpccParams& p, HpccState& s, const IntStack& stamps, std::uint32_t acked,
                 std::uint32_t snd_nxt);

struct SwiftParams {
  double mtu = 4096;            // bytes per packet (the window is counted in packets)
  Time base_target = 5 * kUs;   // target delay of a path of no switches...
  Time per_hop = 1 * kUs;       // ...plus this per switch on the path
  Time fs_range = 0;            // flow scaling: up to this more target for small windows
  double fs_min_cwnd = 0.1, fs_max_cwnd = 100;  // packets: where flow scaling is full, nil
  double ai = 1;                // packets per round trip
  double beta = 0.8;            // multiplicative decrease gain
  double max_mdf = 0.5;         // largest decrease at once
  double min_cwnd = 0.01, max_cwnd = 0;  // packets (max 0: none)
  double line_bps = 100e9;
};

struct SwiftState {
  double cwnd = 0;          // packets
  Time rtt = 0;             // last measured
  Time last_decrease = 0;
  bool decreased = false;   // last_decrease is set
  double pacing_bps = 0;
  double window = 0;        // bytes (cwnd x mtu)
};

// A new sender: one bandwidth-delay product of the path's target delay.
SwiftState swift_start(const SwiftParams& p, int hops);
// The target delay for a window of `cwnd` packets on a path of `hops` switches.
Time swift_target(const SwiftParams& p, int hops, double cwnd);
// An ACK for `acked_packets` new packets measured the round trip `delay` at `now`.
void swift_on_ack(const SwiftParams& p, SwiftState& s, int hops, Time delay, int acked_packets, Time now);
// A loss signal (NAK or timeout): one multiplicative decrease by max_mdf, at most once per
// round trip.
void swift_on_loss(const SwiftParams& p, SwiftState& s, Time now);

struct NsccParams {
  double mtu = 4096;
  double line_bps = 100e9;
  Time base_rtt = 4 * kUs;      // the path's round trip when idle (a first estimate)
  double target_fraction = 0.75;  // target queueing delay as a fraction of the base round trip
  double pi = 4;                // proportional increase: packets per round trip at no delay
  double fi = 1;                // fair increase: packets per round trip
  double gamma = 0.8;           // multiplicative decrease gain
  double max_md = 0.5;          // largest decrease at once
  double delay_alpha = 0.125;   // weight of a new sample in the average queueing delay
};

struct NsccState {
  double cwnd = 0;              // bytes
  Time base_rtt = 0;            // the smallest round trip seen
  Time rtt = 0;                 // the last one measured
  double avg_delay = 0;         // seconds of queueing, averaged
  Time last_decrease = 0;
  bool decreased = false;
  // Quick adapt: bytes acknowledged in the current window of base_rtt + target, when it
  // ends, whether a trim or loss asked for it, and how many acknowledged bytes to ignore
  // after one (those that were in flight at its time).
  double achieved = 0;
  Time qa_end = 0;
  bool trigger_qa = false;
  double ignore = 0;
};

NsccState nscc_start(const NsccParams& p);
Time nscc_target(const NsccParams& p, const NsccState& s);
// An ACK for `acked_bytes` new bytes measured the round trip `rtt`; `ecn` is its echo of a
// congestion mark; `in_flight` bytes are unacknowledged.
void nscc_on_ack(const NsccParams& p, NsccState& s, Time rtt, bool ecn, double acked_bytes, double in_flight, Time now);
// A NACK for a trimmed (or lost) packet of `bytes`.
void nscc_on_nack(const NsccParams& p, NsccState& s, double bytes, double in_flight, Time now);

}  // namespace weft::sim
