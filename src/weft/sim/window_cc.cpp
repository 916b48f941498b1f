#include "weft/sim/window_cc.h"

#include <algorithm>
#include <cmath>

namespace weft::sim {

// --- HPCC (Li et al., SIGCOMM 2019, algorithm 1) ---

HpccState hpcc_start(const HpccParams& p) {
  HpccState s;
  s.window = s.window_ref = p.line_bps / 8 * p.base_rtt_s;
  return s;
}

void hpcc_on_ack(const HpccParams& p, HpccState& s, const IntStack& stamps, std::uint32_t acked,
                 std::uint32_t snd_nxt) {
  const double T = p.base_rtt_s, eta = p.eta;
  // MeasureInflight: each hop's queue (the smaller of two samples, against a T's worth of
  // its bytes) plus its transmit rate since the previous stamp, both against its speed; the
  // most utilized hop counts, smoothed over the time its samples span.
  if (stamps.n > 0 && stamps.n == s.last.n) {
    double u = 0, tau = T;
    bool measured = false;
    for (int i = 0; i < stamps.n; ++i) {
      const IntHop &now = stamps.hop[i], &before = s.last.hop[i];
      const double dt = to_seconds(now.ts - before.ts);
      if (now.ts <= before.ts || now.bps <= 0) continue;
      const double tx_rate = static_cast<double>(now.tx_bytes - before.tx_bytes) * 8 / dt;
      const double hop_u = static_cast<double>(std::min(now.qlen, before.qlen)) * 8 / (now.bps * T) + tx_rate / now.bps;
      if (!measured || hop_u > u) u = hop_u, tau = dt;
      measured = true;
    }
    if (measured) {
      tau = std::min(tau, T);
      s.utilization = (1 - tau / T) * s.utilization + tau / T * u;
      // ComputeWind: the reference window moves once per round (an ACK past round_end).
      const bool new_round = acked > s.round_end;
      double w;
      if (s.utilization >= eta || s.inc_stage >= p.max_stage) {
        w = s.window_ref / (s.utilization / eta) + p.w_ai;
        if (new_round) s.inc_stage = 0, s.window_ref = w;
      } else {
        w = s.window_ref + p.w_ai;
        if (new_round) ++s.inc_stage, s.window_ref = w;
      }
      const double w_max = p.line_bps / 8 * T;
      s.window = std::clamp(w, 64.0, w_max);
      s.window_ref = std::min(s.window_ref, w_max);
      if (new_round) s.round_end = snd_nxt;
      // Paced at W / T; a full window is the line rate, not limited.
      s.pacing_bps = s.window >= w_max * 0.999 ? 0 : s.window * 8 / T;
    }
  }
  s.last = stamps;
}

// --- Swift (Kumar et al., SIGCOMM 2020, algorithm 1 and section 3.1) ---

Time swift_target(const SwiftParams& p, int hops, double cwnd) {
  double fs = 0;
  if (p.fs_range > 0 && p.fs_max_cwnd > p.fs_min_cwnd) {
    // alpha / sqrt(cwnd) + beta, from fs_range at fs_min_cwnd down to 0 at fs_max_cwnd.
    const double range = static_cast<double>(p.fs_range);
    const double alpha = range / (1 / std::sqrt(p.fs_min_cwnd) - 1 / std::sqrt(p.fs_max_cwnd));
    const double beta = -alpha / std::sqrt(p.fs_max_cwnd);
    fs = std::clamp(alpha / std::sqrt(std::max(cwnd, 1e-9)) + beta, 0.0, range);
  }
  return p.base_target + static_cast<Time>(hops) * p.per_hop + static_cast<Time>(std::llround(fs));
}

namespace {
void swift_settle(const SwiftParams& p, SwiftState& s) {
  s.cwnd = std::max(s.cwnd, p.min_cwnd);
  if (p.max_cwnd > 0) s.cwnd = std::min(s.cwnd, p.max_cwnd);
  s.window = s.cwnd * p.mtu;
  // Below one packet the window cannot clock the sender: it is paced at cwnd per round trip.
  s.pacing_bps = s.cwnd < 1 && s.rtt > 0 ? s.cwnd * p.mtu * 8 / to_seconds(s.rtt) : 0;
}
bool may_decrease(const SwiftState& s, Time now) { return !s.decreased || now - s.last_decrease >= s.rtt; }
}  // namespace

SwiftState swift_start(const SwiftParams& p, int hops) {
  SwiftState s;
  s.cwnd = p.line_bps / 8 * to_seconds(swift_target(p, hops, p.fs_max_cwnd)) / p.mtu;
  swift_settle(p, s);
  return s;
}

void swift_on_ack(const SwiftParams& p, SwiftState& s, int hops, Time delay, int acked_packets, Time now) {
  s.rtt = delay;
  const Time target = swift_target(p, hops, s.cwnd);
  if (delay < target) {
    // Additive increase: ai packets per round trip.
    s.cwnd += s.cwnd >= 1 ? p.ai / s.cwnd * acked_packets : p.ai * acked_packets;
  } else if (may_decrease(s, now)) {
    const double over = static_cast<double>(delay - target) / static_cast<double>(delay);
    s.cwnd *= std::max(1 - p.beta * over, 1 - p.max_mdf);
    s.last_decrease = now;
    s.decreased = true;
  }
  swift_settle(p, s);
}

void swift_on_loss(const SwiftParams& p, SwiftState& s, Time now) {
  if (!may_decrease(s, now)) return;
  s.cwnd *= 1 - p.max_mdf;
  s.last_decrease = now;
  s.decreased = true;
  swift_settle(p, s);
}

// --- NSCC (Ultra Ethernet Transport 1.0, sender-based congestion control) ---

namespace {
double bdp(const NsccParams& p, const NsccState& s) { return p.line_bps / 8 * to_seconds(s.base_rtt); }
void nscc_settle(const NsccParams& p, NsccState& s) {
  s.cwnd = std::clamp(s.cwnd, p.mtu, std::max(1.5 * bdp(p, s), p.mtu));
}
// Quick adapt: at the end of each window of base_rtt + target, if a trim or loss asked for
// it, the window falls to the bytes delivered in that window, and the acknowledgements of
// what was in flight then are not acted on. Returns true when it acted.
bool quick_adapt(const NsccParams& p, NsccState& s, double in_flight, Time now) {
  bool acted = false;
  if (now > s.qa_end) {
    if (s.qa_end != 0 && s.trigger_qa) {
      s.cwnd = std::max(s.achieved, p.mtu);
      s.ignore = in_flight;
      s.trigger_qa = false;
      acted = true;
    }
    s.achieved = 0;
    s.qa_end = now + s.base_rtt + nscc_target(p, s);
  }
  return acted;
}
}  // namespace

NsccState nscc_start(const NsccParams& p) {
  NsccState s;
  s.base_rtt = p.base_rtt;
  s.cwnd = bdp(p, s);
  nscc_settle(p, s);
  return s;
}

Time nscc_target(const NsccParams& p, const NsccState& s) {
  return static_cast<Time>(std::llround(p.target_fraction * static_cast<double>(s.base_rtt)));
}

void nscc_on_ack(const NsccParams& p, NsccState& s, Time rtt, bool ecn, double acked_bytes, double in_flight, Time now) {
  s.rtt = rtt;
  if (rtt > 0 && rtt < s.base_rtt) s.base_rtt = rtt;
  const double delay = to_seconds(rtt > s.base_rtt ? rtt - s.base_rtt : 0);
  s.avg_delay = p.delay_alpha * delay + (1 - p.delay_alpha) * s.avg_delay;
  s.achieved += acked_bytes;
  if (s.ignore > 0) {
    // Acknowledgements of what was in flight at the last quick adapt: their signals are old.
    s.ignore -= acked_bytes;
    if (ecn) return nscc_settle(p, s);
  }
  if (quick_adapt(p, s, in_flight, now)) return nscc_settle(p, s);
  const double target = to_seconds(nscc_target(p, s));
  // An increase of `inc` bytes^2 over the acknowledged bytes adds inc / cwnd: per round trip
  // (a window acknowledged) that is the packets named below.
  double inc = 0;
  if (!ecn && delay < target) {
    // Proportional increase: up to pi packets per round trip, less as the delay nears target.
    inc = p.pi * p.mtu * (target - delay) / target * acked_bytes;
  } else if (!ecn) {
    inc = p.fi * p.mtu * acked_bytes;  // fair increase: fi packets per round trip
  } else if (delay >= target) {
    if (s.avg_delay > target && (!s.decreased || now - s.last_decrease > s.base_rtt)) {
      s.cwnd *= std::max(1 - p.gamma * (s.avg_delay - target) / s.avg_delay, 1 - p.max_md);
      s.last_decrease = now;
      s.decreased = true;
    }
  }
  // (A mark under the target delay: another path's congestion; spraying moves on.)
  s.cwnd += inc / s.cwnd;
  nscc_settle(p, s);
}

void nscc_on_nack(const NsccParams& p, NsccState& s, double bytes, double in_flight, Time now) {
  s.trigger_qa = true;
  if (!quick_adapt(p, s, in_flight, now)) s.cwnd -= bytes;
  nscc_settle(p, s);
}

}  // namespace weft::sim
