#include "weft/sim/config.h"
#include "weft/sim/packet.h"

#include "weft/util/size.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>

#include "weft/util/error.h"

namespace weft::sim {
namespace {

// Splits "150KB" into 150 and "KB"; throws when there is no number.
std::pair<double, std::string> split_number(const std::string& text, const std::string& what) {
  std::size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (...) {
    throw ConfigError(what + ": '" + text + "' is not a number");
  }
  if (!std::isfinite(value) || value < 0) throw ConfigError(what + ": '" + text + "' must be a finite value >= 0");
  std::string unit = text.substr(pos);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  return {value, unit};
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

struct Entry {
  ConfigKey doc;
  std::function<void(SimConfig&, const std::string&, const std::string&)> set;
  std::function<std::string(const SimConfig&)> get;
};

std::string fmt_double(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}
std::string fmt_time(Time t) {
  char buf[64];
  if (t % kSec == 0 && t >= kSec) std::snprintf(buf, sizeof buf, "%llus", static_cast<unsigned long long>(t / kSec));
  else if (t % kMs == 0 && t >= kMs) std::snprintf(buf, sizeof buf, "%llums", static_cast<unsigned long long>(t / kMs));
  else if (t % kUs == 0 && t >= kUs) std::snprintf(buf, sizeof buf, "%lluus", static_cast<unsigned long long>(t / kUs));
  else std::snprintf(buf, sizeof buf, "%lluns", static_cast<unsigned long long>(t / kNs));
  return buf;
}

template <typename E>
E parse_enum(const std::string& key, const std::string& value, std::initializer_list<std::pair<const char*, E>> options) {
  std::string known;
  for (const auto& [name, e] : options) {
    if (value == name) return e;
    known += (known.empty() ? "" : ", ") + std::string(name);
  }
  throw ConfigError(key + ": unknown value '" + value + "' (one of " + known + ")");
}

template <typename E>
std::string enum_name(E v, std::initializer_list<std::pair<const char*, E>> options) {
  for (const auto& [name, e] : options)
    if (e == v) return name;
  return "?";
}

#define WEFT_ENUM(key, field, help, ...)                                                                \
  Entry {                                                                                                \
    {key, "choice", help}, [](SimConfig& c, const std::string& k, const std::string& v) {               \
      c.field = parse_enum<decltype(c.field)>(k, v, {__VA_ARGS__});                                                         \
    },                                                                                                   \
        [](const SimConfig& c) { return enum_name<decltype(c.field)>(c.field, {__VA_ARGS__}); }                             \
  }

Entry bytes_entry(const char* key, std::int64_t SimConfig::*field, const char* help) {
  return {{key, "bytes", help},
          [field](SimConfig& c, const std::string& k, const std::string& v) { c.*field = parse_bytes(v, k); },
          [field](const SimConfig& c) { return std::to_string(c.*field); }};
}
Entry time_entry(const char* key, Time SimConfig::*field, const char* help) {
  return {{key, "time", help},
          [field](SimConfig& c, const std::string& k, const std::string& v) { c.*field = parse_time(v, k); },
          [field](const SimConfig& c) { return fmt_time(c.*field); }};
}
Entry rate_entry(const char* key, double SimConfig::*field, const char* help) {
  return {{key, "rate", help},
          [field](SimConfig& c, const std::string& k, const std::string& v) { c.*field = parse_rate(v, k); },
          [field](const SimConfig& c) { return fmt_double(c.*field / 1e6) + "M"; }};
}
Entry double_entry(const char* key, double SimConfig::*field, double lo, double hi, const char* help) {
  return {{key, "number", help},
          [field, lo, hi](SimConfig& c, const std::string& k, const std::string& v) {
            double x = split_number(v, k).first;
            if (!split_number(v, k).second.empty() || x < lo || x > hi)
              throw ConfigError(k + ": '" + v + "' must be a number in [" + fmt_double(lo) + ", " + fmt_double(hi) + "]");
            c.*field = x;
          },
          [field](const SimConfig& c) { return fmt_double(c.*field); }};
}
template <typename I>
Entry int_entry(const char* key, I SimConfig::*field, long long lo, long long hi, const char* help) {
  return {{key, "integer", help},
          [field, lo, hi](SimConfig& c, const std::string& k, const std::string& v) {
            auto [x, unit] = split_number(v, k);
            if (!unit.empty() || x != std::floor(x) || x < static_cast<double>(lo) || x > static_cast<double>(hi))
              throw ConfigError(k + ": '" + v + "' must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
            c.*field = static_cast<I>(x);
          },
          [field](const SimConfig& c) { return std::to_string(c.*field); }};
}
Entry bool_entry(const char* key, bool SimConfig::*field, const char* help) {
  return {{key, "on|off", help},
          [field](SimConfig& c, const std::string& k, const std::string& v) {
            if (v == "on" || v == "true" || v == "1") c.*field = true;
            else if (v == "off" || v == "false" || v == "0") c.*field = false;
            else throw ConfigError(k + ": '" + v + "' must be on or off");
          },
          [field](const SimConfig& c) { return std::string(c.*field ? "on" : "off"); }};
}

const std::vector<Entry>& entries() {
  static const std::vector<Entry> table = [] {
    std::vector<Entry> t = {
        int_entry("seed", &SimConfig::seed, 0, 1LL << 62, "random seed: marking, spraying, hash seeds"),
        int_entry("threads", &SimConfig::threads, 0, PacketPool::kMaxStores - 1,
                  "threads that run the nodes' events (0: one per processor); the results do not depend on it"),
        WEFT_ENUM("mode", mode, "packet by packet, or flows at max-min fair rates (no queues, PFC, ECN or congestion control)",
                  {"packet", SimMode::kPacket}, {"flow", SimMode::kFlow}),
        double_entry("flow.tolerance", &SimConfig::flow_tolerance, 0, 0.1,
                     "mode=flow: a flow completes once its rest would take under this fraction of its time so far (0: exact)"),
        time_entry("flow.batch", &SimConfig::flow_batch,
                   "mode=flow: a flow that starts waits at most this long for its rate, computed once for the changes meanwhile (0: exact)"),
        int_entry("qos.roce_dscp", &SimConfig::roce_dscp, 0, 63, "DSCP of RoCE data"),
        int_entry("qos.roce_queue", &SimConfig::roce_queue, 0, 7, "queue (priority) of RoCE data"),
        int_entry("qos.cnp_dscp", &SimConfig::cnp_dscp, 0, 63, "DSCP of CNPs"),
        int_entry("qos.cnp_queue", &SimConfig::cnp_queue, 0, 7, "queue of CNPs"),
        int_entry("qos.strict_from", &SimConfig::strict_queue, 0, 8, "queues >= this are strict priority; the rest share by DWRR"),
        WEFT_ENUM("switching", switching, "switches forward a frame once all of it is in, or once its headers are (where no port of the switch is faster than the frame's link)",
                  {"store-and-forward", Switching::kStoreAndForward}, {"cut-through", Switching::kCutThrough}),
        WEFT_ENUM("queuing", queuing, "a switch queues by egress port and class (output), or by ingress port too (voq: virtual output queues served in turn, ECN on each one's depth)",
                  {"output", Queuing::kOutput}, {"voq", Queuing::kVirtualOutput}),
        bytes_entry("buffer", &SimConfig::buffer_bytes, "shared packet buffer per switch"),
        bool_entry("ecn", &SimConfig::ecn, "WRED/ECN marking of ECN-capable packets"),
        bytes_entry("ecn.min", &SimConfig::wred_min, "WRED minimum: marking starts above this egress queue depth (with queuing=voq, the packet's VOQ's)"),
        bytes_entry("ecn.max", &SimConfig::wred_max, "WRED maximum: every packet marked above this depth"),
        double_entry("ecn.pmax", &SimConfig::wred_pmax, 0, 1, "marking probability at the WRED maximum"),
        bytes_entry("drop_threshold", &SimConfig::drop_threshold, "egress queue depth above which lossy packets are dropped"),
        bool_entry("pfc", &SimConfig::pfc, "priority flow control for the RoCE queue"),
        bytes_entry("pfc.xoff", &SimConfig::pfc_xoff, "static ingress bytes per port and priority that send a pause (0: dynamic, pfc.alpha x free shared buffer)"),
        double_entry("pfc.alpha", &SimConfig::pfc_alpha, 1.0 / 1024, 64, "dynamic xOFF: this fraction of the switch's free shared buffer per ingress port"),
        bytes_entry("pfc.xon_offset", &SimConfig::pfc_xon_offset, "a resume (quanta 0) is sent once ingress bytes are this far below xOFF and the headroom is empty"),
        bytes_entry("pfc.headroom", &SimConfig::pfc_headroom, "per ingress port, reserved out of the buffer, for what arrives after a pause (0: the link's round trip of bytes + 3 frames)"),
        int_entry("pfc.quanta", &SimConfig::pfc_quanta, 1, 0xFFFF, "pause time carried by a pause frame, in 512-bit times"),
        time_entry("pfc.watchdog", &SimConfig::pfc_watchdog, "a queue paused longer than this is declared a storm and un-paused (0: off)"),
        bytes_entry("rdma.mtu", &SimConfig::mtu, "RDMA payload bytes per packet"),
        bytes_entry("coarse", &SimConfig::coarse,
                    "scale mode: simulate chunks of this size instead of MTU packets, thresholds scaled (0: off)"),
        WEFT_ENUM("rdma.write", write_mode, "opcodes of a multi-packet write: first-middle-last, or write-only per packet",
                  {"first-middle-last", WriteMode::kFirstMiddleLast}, {"write-only", WriteMode::kWriteOnly}),
        WEFT_ENUM("rdma.retransmit", retransmit, "loss recovery of the sender", {"go-back-n", Retransmit::kGoBackN},
                  {"selective", Retransmit::kSelective}),
        int_entry("rdma.ack_every", &SimConfig::ack_every, 1, 1 << 20, "in-order packets per coalesced ACK (the last packet of a message is always ACKed)"),
        int_entry("rdma.ack_timeout", &SimConfig::ack_timeout, 1, 31, "local ACK timeout exponent: a retransmission after 4.096 us x 2^n without progress"),
        time_entry("rdma.rto", &SimConfig::rto, "retransmission timeout instead of rdma.ack_timeout's (0: from the exponent)"),
        WEFT_ENUM("rdma.send_done", send_done, "a sending step completes when its data went on the wire (NCCL's pipelining) or when it is acknowledged",
                  {"sent", SendDone::kSent}, {"acked", SendDone::kAcked}),
        int_entry("rdma.qps", &SimConfig::qps_per_connection, 1, 256, "queue pairs per connection; a message is split across them"),
        WEFT_ENUM("cc", cc, "congestion control", {"dcqcn", CongestionControl::kDcqcn}, {"hpcc", CongestionControl::kHpcc},
                  {"swift", CongestionControl::kSwift}, {"nscc", CongestionControl::kNscc}, {"none", CongestionControl::kNone}),
        double_entry("hpcc.eta", &SimConfig::hpcc_eta, 0.5, 1, "HPCC target utilization"),
        int_entry("hpcc.max_stage", &SimConfig::hpcc_max_stage, 0, 1000, "HPCC additive-increase rounds before a multiplicative update"),
        time_entry("hpcc.rtt", &SimConfig::hpcc_rtt, "HPCC base round trip T (the initial window is the line rate x T)"),
        rate_entry("hpcc.rai", &SimConfig::hpcc_rai, "HPCC additive increase per round, as a rate (default: line rate / 2000)"),
        time_entry("swift.base_target", &SimConfig::swift_base_target, "Swift target queueing delay over the path's idle round trip"),
        time_entry("swift.per_hop", &SimConfig::swift_per_hop, "Swift target queueing delay added per switch on the path"),
        time_entry("swift.fs_range", &SimConfig::swift_fs_range, "Swift flow scaling: up to this more target delay for windows under 100 packets (0: off)"),
        double_entry("swift.ai", &SimConfig::swift_ai, 0, 1000, "Swift additive increase, packets per round trip"),
        double_entry("swift.beta", &SimConfig::swift_beta, 0, 1, "Swift multiplicative decrease gain"),
        double_entry("swift.max_mdf", &SimConfig::swift_max_mdf, 0, 1, "Swift largest multiplicative decrease at once"),
        double_entry("nscc.target", &SimConfig::nscc_target_fraction, 0.01, 100, "NSCC target queueing delay, as a fraction of the path's base round trip"),
        double_entry("nscc.pi", &SimConfig::nscc_pi, 0, 1000, "NSCC proportional increase at no queueing delay, packets per round trip"),
        double_entry("nscc.fi", &SimConfig::nscc_fi, 0, 1000, "NSCC fair increase, packets per round trip"),
        double_entry("nscc.gamma", &SimConfig::nscc_gamma, 0, 1, "NSCC multiplicative decrease gain"),
        double_entry("nscc.max_md", &SimConfig::nscc_max_md, 0, 1, "NSCC largest multiplicative decrease at once"),
        bool_entry("trim", &SimConfig::trim, "packet trimming: switches cut the payload of lossy data packets instead of dropping them"),
        bytes_entry("trim.threshold", &SimConfig::trim_threshold, "egress queue depth above which a lossy data packet is trimmed (0: the drop threshold)"),
        double_entry("rdma.pacing_jitter", &SimConfig::pacing_jitter, 0, 1, "window-controlled senders (HPCC, Swift, NSCC) vary each paced gap uniformly by +- half this fraction"),
        time_entry("cnp.interval", &SimConfig::cnp_interval, "at most one CNP per QP per interval (notification point)"),
        double_entry("dcqcn.g", &SimConfig::dcqcn_g, 0, 1, "alpha gain"),
        time_entry("dcqcn.alpha_timer", &SimConfig::dcqcn_alpha_timer, "alpha decays when no CNP came for this long"),
        time_entry("dcqcn.rate_timer", &SimConfig::dcqcn_rate_timer, "rate-increase timer"),
        bytes_entry("dcqcn.byte_counter", &SimConfig::dcqcn_byte_counter, "bytes sent per rate-increase event"),
        int_entry("dcqcn.f", &SimConfig::dcqcn_f, 1, 1000, "fast-recovery steps before additive increase"),
        rate_entry("dcqcn.rai", &SimConfig::dcqcn_rai, "additive increase step (0: line rate / 1000)"),
        rate_entry("dcqcn.rhai", &SimConfig::dcqcn_rhai, "hyper increase step (0: 10 x the additive step)"),
        rate_entry("dcqcn.min_rate", &SimConfig::dcqcn_min_rate, "lowest rate a cut reaches"),
        WEFT_ENUM("lb", lb, "load balancing at every multi-path hop", {"ecmp", LoadBalancing::kEcmp},
                  {"flowlet", LoadBalancing::kFlowlet}, {"spray", LoadBalancing::kSpray}, {"adaptive", LoadBalancing::kAdaptive}),
        WEFT_ENUM("ar.granularity", ar_granularity, "adaptive routing decides per packet, or per flowlet (a new one after flowlet.gap idle)",
                  {"packet", ArGranularity::kPacket}, {"flowlet", ArGranularity::kFlowlet}),
        bool_entry("ar.remote", &SimConfig::ar_remote, "adaptive routing also weighs the next switch's least queue toward the destination"),
        time_entry("ar.signal_interval", &SimConfig::ar_signal_interval, "the next switch's queues as adaptive routing sees them are at most this old"),
        WEFT_ENUM("ecmp.hash", hash, "ECMP hash of the 5-tuple", {"crc32", HashFunction::kCrc32}, {"xor", HashFunction::kXor}),
        bool_entry("ecmp.distinct_seeds", &SimConfig::distinct_seeds, "each switch hashes with its own seed (off: one seed everywhere)"),
        int_entry("nccl.channels_per_nic", &SimConfig::channels_per_nic, 1, 32, "rail_rings collectives run this many rings per rail (NCCL's channels per NIC), each with its share of the data on queue pairs of its own; fewer for a small call, as NCCL"),
        bool_entry("pxn", &SimConfig::pxn, "NCCL's PXN: a message to another host's GPU on another rail goes over NVLink to the sender host's GPU on that rail, whose NIC sends it"),
        WEFT_ENUM("spray.mode", spray, "per-packet path choice", {"random", SprayMode::kRandom},
                  {"round-robin", SprayMode::kRoundRobin}, {"least-loaded", SprayMode::kLeastLoaded}),
        time_entry("flowlet.gap", &SimConfig::flowlet_gap, "idle gap that starts a new flowlet"),
        time_entry("link.jitter", &SimConfig::link_jitter, "random extra propagation delay per frame, up to this (capped at 90% of the link's shortest frame time; 0: lockstep)"),
        double_entry("link.loss", &SimConfig::link_loss, 0, 1, "fraction of frames lost on every link, at random"),
        double_entry("link.ber", &SimConfig::link_ber, 0, 1, "bit error rate of every link (a frame of b bits is lost with probability 1 - (1 - ber)^b)"),
        time_entry("routing.convergence", &SimConfig::routing_convergence, "routes are recomputed this long after a failure (0: at once); until then packets toward a failed link are lost"),
        bool_entry("ecmp.weighted", &SimConfig::ecmp_weighted, "ECMP in proportion to each port's speed (weighted ECMP: a degraded link takes less)"),
        time_entry("sample.interval", &SimConfig::sample_interval, "queue occupancy sampling period (0: none)"),
        bool_entry("sample.qps", &SimConfig::sample_qps, "also sample each QP's delivered rate, CNPs and DCQCN state (qps.csv)"),
        time_entry("time_limit", &SimConfig::time_limit, "simulated time after which the run stops as unfinished"),
        {{"pcap", "a:b", "capture the link between nodes a and b (both directions) to DIR/link.pcap"},
         [](SimConfig& c, const std::string&, const std::string& v) { c.pcap_link = v; },
         [](const SimConfig& c) { return c.pcap_link.empty() ? std::string("none") : c.pcap_link; }},
    };
    for (int q = 0; q < 8; ++q) {
      std::string key = "dwrr." + std::to_string(q);
      t.push_back({{key, "number", "DWRR weight of queue " + std::to_string(q)},
                   [q](SimConfig& c, const std::string& k, const std::string& v) {
                     auto [x, unit] = split_number(v, k);
                     if (!unit.empty() || x <= 0) throw ConfigError(k + ": '" + v + "' must be a number > 0");
                     c.dwrr_weight[q] = x;
                   },
                   [q](const SimConfig& c) { return fmt_double(c.dwrr_weight[q]); }});
    }
    return t;
  }();
  return table;
}

}  // namespace

std::int64_t parse_bytes(const std::string& text, const std::string& what) { return parse_size(text, what); }

Time parse_time(const std::string& text, const std::string& what) {
  auto [v, unit] = split_number(text, what);
  std::string u = lower(unit);
  if (u.empty() && v == 0) return 0;
  double scale = 0;
  if (u == "ps") scale = 1;
  else if (u == "ns") scale = 1e3;
  else if (u == "us") scale = 1e6;
  else if (u == "ms") scale = 1e9;
  else if (u == "s") scale = 1e12;
  else throw ConfigError(what + ": '" + text + "' needs a time unit (ps, ns, us, ms, s)");
  double ps = v * scale;
  // At most 2^62 ps (53 days): a time plus a delay (the clock at the time limit plus a
  // timeout or a convergence delay) then still fits the 64-bit clock.
  if (ps > 4.6e18) throw ConfigError(what + ": '" + text + "' is too long (at most 53 days)");
  return static_cast<Time>(std::llround(ps));
}

double parse_rate(const std::string& text, const std::string& what) {
  auto [v, unit] = split_number(text, what);
  std::string u = lower(unit);
  if (u.size() > 3 && u.substr(u.size() - 3) == "bps") u.resize(u.size() - 3);
  else if (u.size() > 4 && u.substr(u.size() - 4) == "b/s") u.resize(u.size() - 4);
  double scale = 0;
  if (u.empty()) scale = 1;
  else if (u == "k") scale = 1e3;
  else if (u == "m") scale = 1e6;
  else if (u == "g") scale = 1e9;
  else if (u == "t") scale = 1e12;
  else throw ConfigError(what + ": unknown rate unit in '" + text + "' (e.g. 400G, 100Gbps, 40M)");
  if (v <= 0) throw ConfigError(what + ": rate '" + text + "' must be > 0");
  return v * scale;
}

void apply_setting(SimConfig& config, const std::string& assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError("--set '" + assignment + "': expected key=value (see 'weft sim --list-keys')");
  std::string key = assignment.substr(0, eq), value = assignment.substr(eq + 1);
  for (const Entry& e : entries())
    if (e.doc.key == key) {
      e.set(config, key, value);
      config.given_keys.push_back(key);
      return;
    }
  throw ConfigError("--set: unknown key '" + key + "' (see 'weft sim --list-keys')");
}

namespace {

// What a key is for when this run does not use it: the setting it needs ("cc=hpcc") and the
// key that decides it ("cc"); {"", ""} when the run uses it.
std::pair<std::string, std::string> needed_for(const SimConfig& c, const std::string& key) {
  const auto is = [&key](const char* prefix) { return key.rfind(prefix, 0) == 0; };
  if (c.mode == SimMode::kFlow)  // flows at max-min fair rates: no queues, PFC, ECN or congestion control
    for (const char* p : {"qos.", "switching", "queuing", "buffer", "ecn", "drop_threshold", "pfc", "cc", "hpcc.",
                          "swift.", "nscc.", "dcqcn.", "cnp.", "trim", "dwrr."})
      if (is(p)) return {"mode=packet", "mode"};
  struct Control {
    const char* prefix;
    CongestionControl cc;
    const char* name;
  };
  for (const Control& k : {Control{"hpcc.", CongestionControl::kHpcc, "hpcc"}, Control{"swift.", CongestionControl::kSwift, "swift"},
                           Control{"nscc.", CongestionControl::kNscc, "nscc"}, Control{"dcqcn.", CongestionControl::kDcqcn, "dcqcn"},
                           Control{"cnp.", CongestionControl::kDcqcn, "dcqcn"}})
    if (is(k.prefix) && c.cc != k.cc) return {std::string("cc=") + k.name, "cc"};
  if (is("ar.") && c.lb != LoadBalancing::kAdaptive) return {"lb=adaptive", "lb"};
  if (is("spray.") && c.lb != LoadBalancing::kSpray) return {"lb=spray", "lb"};
  if (is("flowlet.") && c.lb != LoadBalancing::kFlowlet &&
      !(c.lb == LoadBalancing::kAdaptive && c.ar_granularity == ArGranularity::kFlowlet))
    return {"lb=flowlet (or lb=adaptive with ar.granularity=flowlet)", "lb"};
  if (is("pfc.") && !c.pfc) return {"pfc=on", "pfc"};
  if (is("ecn.") && !c.ecn) return {"ecn=on", "ecn"};
  if (is("trim.") && !c.trim) return {"trim=on", "trim"};
  return {"", ""};
}

}  // namespace

void check_config(const SimConfig& config) {
  for (const std::string& key : config.given_keys) {
    const auto [needs, decided_by] = needed_for(config, key);
    if (!needs.empty())
      throw ConfigError(key + " does not apply to this run: it is for " + needs + ", and the run has " + decided_by + "=" +
                        describe_value(config, decided_by));
  }
  if (config.pfc_xoff > 0 && config.pfc_xon_offset > config.pfc_xoff)
    throw ConfigError("pfc.xon_offset (" + std::to_string(config.pfc_xon_offset) + ") must not exceed pfc.xoff (" +
                      std::to_string(config.pfc_xoff) + ")");
  if (config.wred_min > config.wred_max) throw ConfigError("ecn.min must not exceed ecn.max");
  if (config.mtu < 256 || config.mtu > (64 << 20)) throw ConfigError("rdma.mtu must be in [256 B, 64 MiB]");
  if (config.hpcc_rtt == 0) throw ConfigError("hpcc.rtt must be > 0 (HPCC's windows and utilization are against it)");
  if (config.mode != SimMode::kFlow && (config.flow_tolerance > 0 || config.flow_batch > 0))
    throw ConfigError(std::string(config.flow_tolerance > 0 ? "flow.tolerance" : "flow.batch") +
                      " applies to the flow-level mode: add --set mode=flow");
}

void finalize_config(SimConfig& c) {
  if (c.rto == 0) c.rto = static_cast<Time>(4096) * kNs * (Time{1} << c.ack_timeout);
  if (c.coarse > 0) {
    const std::int64_t k = c.coarse;
    c.mtu = k;
    c.ack_every = 1;
    c.rto = std::max<Time>(c.rto, 100 * kMs);
    c.wred_min = std::max(c.wred_min, 2 * k);
    c.wred_max = std::max(c.wred_max, 6 * k);
    if (c.pfc_xoff > 0) c.pfc_xoff = std::max(c.pfc_xoff, 8 * k);
    c.pfc_xon_offset = std::max(c.pfc_xon_offset, 2 * k);
    c.drop_threshold = std::max(c.drop_threshold, 16 * k);
    c.buffer_bytes = std::max(c.buffer_bytes, 256 * k);
  }
  check_config(c);
}

std::vector<ConfigKey> config_keys() {
  std::vector<ConfigKey> keys;
  for (const Entry& e : entries()) keys.push_back(e.doc);
  return keys;
}

std::string describe_value(const SimConfig& config, const std::string& key) {
  for (const Entry& e : entries())
    if (e.doc.key == key) return e.get(config);
  throw ConfigError("unknown key '" + key + "'");
}

}  // namespace weft::sim
