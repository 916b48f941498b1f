// Every parameter of a simulation, with its default, as one table: `--set key=value`
// changes any of them, `weft sim --list-keys` prints them, docs/simulator.md explains
// where each default comes from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/sim/engine.h"

namespace weft::sim {

enum class LoadBalancing : std::uint8_t { kEcmp, kFlowlet, kSpray, kAdaptive };
enum class ArGranularity : std::uint8_t { kPacket, kFlowlet };
enum class SprayMode : std::uint8_t { kRandom, kRoundRobin, kLeastLoaded };
enum class CongestionControl : std::uint8_t { kDcqcn, kNone, kHpcc, kSwift, kNscc };
enum class WriteMode : std::uint8_t { kFirstMiddleLast, kWriteOnly };
enum class Retransmit : std::uint8_t { kGoBackN, kSelective };
enum class HashFunction : std::uint8_t { kCrc32, kXor };
enum class SendDone : std::uint8_t { kSent, kAcked };
enum class SimMode : std::uint8_t { kPacket, kFlow };
enum class Switching : std::uint8_t { kStoreAndForward, kCutThrough };
enum class Queuing : std::uint8_t { kOutput, kVirtualOutput };

struct SimConfig {
  std::uint64_t seed = 1;
  // Threads of the parallel engine (0: one per processor); the results are the same for
  // any number (parallel_engine.h).
  int threads = 1;
  // Packet by packet, or flow by flow at max-min fair rates (fluid.cpp: for fabrics and
  // iterations beyond packets; no queues, PFC, ECN or congestion control).
  SimMode mode = SimMode::kPacket;
  // Flow-level mode: a flow whose rest would take less than this fraction of the time it has
  // been going completes now (0: exactly when its last byte leaves).
  double flow_tolerance = 0;
  // Flow-level mode: a change (a flow starting or ending) waits at most this long for the
  // changes after it, and the rates are computed once for them all (0: at each change).
  Time flow_batch = 0;

  // Traffic classes (seed 002 chapter 11): RoCE data in DSCP 24 -> queue 3, CNPs in
  // DSCP 48 -> strict-priority queue 7.
  int roce_dscp = 24, roce_queue = 3;
  int cnp_dscp = 48, cnp_queue = 7;
  int strict_queue = 7;              // queues >= this are strict priority, the rest DWRR
  double dwrr_weight[8] = {1, 1, 1, 1, 1, 1, 1, 1};

  // Switching: a store-and-forward switch sends a frame on once all of it is in; a
  // cut-through switch once its first kCutThroughBytes are (packet.h), where the frame came
  // in on a link at least as fast as every port of the switch (a faster egress would run
  // out of bits: such frames are stored and forwarded, as switches do).
  Switching switching = Switching::kStoreAndForward;
  // Queuing at a switch egress: one FIFO per traffic class (output-queued, the shared-buffer
  // switch), or virtual output queues, one per ingress port, served in turn with ECN marked
  // on each one's own depth (voq.h).
  Queuing queuing = Queuing::kOutput;

  // Switch buffers and marking.
  std::int64_t buffer_bytes = 32LL << 20;     // shared buffer per switch
  // ECN marks well below the smallest xOFF a congested port meets, so that DCQCN, not PFC,
  // controls congestion (docs/simulator.md, "Defaults").
  std::int64_t wred_min = 100'000;
  std::int64_t wred_max = 400'000;
  double wred_pmax = 0.2;
  std::int64_t drop_threshold = 4'000'000;    // per egress queue (lossy traffic)
  bool ecn = true;

  // PFC (per ingress port and priority). xOFF is dynamic, as in shared-buffer switches: a
  // port pauses its peer when what it brought in exceeds alpha x the free shared buffer;
  // what arrives after that fills the port's headroom, reserved out of the buffer.
  bool pfc = true;
  std::int64_t pfc_xoff = 0;                  // > 0: a static threshold instead
  double pfc_alpha = 0.125;
  std::int64_t pfc_xon_offset = 64'000;       // resume this far below xOFF (headroom empty)
  std::int64_t pfc_headroom = 0;              // 0: 2 x (link bytes in flight) + 3 frames
  int pfc_quanta = 0xFFFF;                    // pause quanta, 512 bit times each
  Time pfc_watchdog = 100 * kMs;              // 0: no watchdog

  // RoCEv2 transport.
  std::int64_t mtu = 4096;                    // RDMA payload per packet
  std::int64_t coarse = 0;                    // > 0: simulate in chunks of this many bytes (scale mode)
  WriteMode write_mode = WriteMode::kFirstMiddleLast;
  Retransmit retransmit = Retransmit::kGoBackN;
  int ack_every = 16;                         // coalesced ACK every k in-order packets
  // Retransmission timeout: the InfiniBand/RoCE local ACK timeout, 4.096 us x 2^exponent;
  // 18 (1.07 s) is NCCL's NCCL_IB_TIMEOUT default. rto > 0 overrides it.
  int ack_timeout = 18;
  Time rto = 0;
  int qps_per_connection = 1;
  // When a sending step of a collective is done: when its last packet went on the wire, as in
  // NCCL's pipelined steps (the next step waits only for the data it receives), or when the
  // write is acknowledged, as an RDMA completion reports it.
  SendDone send_done = SendDone::kSent;

  // Congestion control: DCQCN (Zhu et al., SIGCOMM 2015) reaction and notification points.
  CongestionControl cc = CongestionControl::kDcqcn;
  Time cnp_interval = 50 * kUs;
  double dcqcn_g = 1.0 / 256;
  Time dcqcn_alpha_timer = 55 * kUs;
  Time dcqcn_rate_timer = 55 * kUs;
  std::int64_t dcqcn_byte_counter = 10'000'000;
  int dcqcn_f = 5;
  // Increase steps, bit/s; 0: the DCQCN paper's 40 Mb/s and 400 Mb/s at 40G, scaled to the
  // NIC's line rate (100 Mb/s and 1 Gb/s at 100G).
  double dcqcn_rai = 0;
  double dcqcn_rhai = 0;
  double dcqcn_min_rate = 100e6;              // bit/s
  // HPCC (Li et al., SIGCOMM 2019): switches stamp each data packet with their egress
  // port's queue, transmitted bytes, time and speed (in-band telemetry); the receiver echoes
  // the stamps in its ACKs; the sender's window W follows the most utilized hop:
  // W = Wc / (U / eta) + W_AI, or Wc + W_AI for up to max_stage rounds while U < eta.
  double hpcc_eta = 0.95;                     // target utilization
  int hpcc_max_stage = 5;
  Time hpcc_rtt = 10 * kUs;                   // base round trip T (W_init = line rate x T)
  double hpcc_rai = 0;                        // additive increase as a rate, bit/s (0: line / 2000, 50 Mb/s at 100G)
  // Swift (Kumar et al., SIGCOMM 2020): the target delay is the path's idle round trip +
  // base_target + per_hop x switches on the path (+ flow scaling up to fs_range for small
  // windows); AIMD on the measured round trip.
  Time swift_base_target = 1 * kUs;
  Time swift_per_hop = 500 * kNs;
  Time swift_fs_range = 0;
  double swift_ai = 1;                        // packets per round trip
  double swift_beta = 0.8;
  double swift_max_mdf = 0.5;
  // NSCC (Ultra Ethernet Transport 1.0): target queueing delay as a fraction of the path's
  // base round trip; increases in packets per round trip; decrease gain and cap.
  double nscc_target_fraction = 0.75;
  double nscc_pi = 4, nscc_fi = 1;
  double nscc_gamma = 0.8, nscc_max_md = 0.5;
  // Packet trimming (Ultra Ethernet): a switch cuts the payload of a lossy data packet that
  // finds its egress queue above trim_threshold (0: the drop threshold) and forwards the
  // header in the strict-priority CNP queue; the receiver NACKs that PSN at once.
  bool trim = false;
  std::int64_t trim_threshold = 0;
  // Window-controlled senders (HPCC, Swift) space paced packets by gaps drawn uniformly
  // within +-pacing_jitter/2 of the rate's: a NIC's scheduler is not a metronome, and exact
  // gaps lock senders in phase, so that one keeps seeing an empty queue and another a full one.
  double pacing_jitter = 0.5;

  // Load balancing.
  LoadBalancing lb = LoadBalancing::kEcmp;
  HashFunction hash = HashFunction::kCrc32;
  bool distinct_seeds = true;                 // false: every switch hashes with one seed
  bool pxn = false;                           // relay cross-rail messages through an NVLink peer (pxn.h)
  int channels_per_nic = 1;                   // rail_rings: rings per rail, each on its own queue pairs
  SprayMode spray = SprayMode::kRandom;
  Time flowlet_gap = 100 * kUs;               // above the queueing delays ECN allows (docs)
  // Switch adaptive routing (lb = adaptive): each packet (or each new flowlet) takes the
  // equal-cost port whose egress queue, plus (ar.remote) the least queue the next switch
  // has toward the destination as it last signalled it, is smallest. The signal is at most
  // ar.signal_interval old.
  ArGranularity ar_granularity = ArGranularity::kPacket;
  bool ar_remote = true;
  Time ar_signal_interval = 1 * kUs;

  // Links: each frame's propagation gets a random extra delay, uniform in [0, jitter], at
  // most 90% of the link's shortest frame time (so a link never reorders): the hosts'
  // clocks and serdes are not in lockstep, and ties between senders fall at random.
  Time link_jitter = 1 * kNs;
  // Frames lost on the wire: a random fraction, and bit errors (a frame of b bits is lost
  // with probability 1 - (1 - ber)^b). Both 0 by default.
  double link_loss = 0, link_ber = 0;

  // Failures: routes are recomputed this long after a link or switch changes (0: at once);
  // until then packets routed to a failed link are lost. Weighted ECMP spreads flows over
  // equal-cost ports in proportion to their speed (a degraded link takes less).
  Time routing_convergence = 0;
  bool ecmp_weighted = false;

  // Reports.
  Time sample_interval = 10 * kUs;            // queue occupancy samples (0: none)
  bool sample_qps = false;                    // also each QP's delivery rate and DCQCN state
  Time time_limit = 10 * kSec;                // simulated time before giving up
  std::string pcap_link;                      // "a:b" node names: capture that link
  // The keys apply_setting set (a flag or --set): one the run does not use (hpcc.* without
  // cc=hpcc, a queue's key with mode=flow) is refused by check_config, never ignored.
  std::vector<std::string> given_keys;
};

struct ConfigKey {
  std::string key, kind, help;
};

// Applies "key=value" (units accepted: 4096, 150KB, 4MiB, 50us, 400G); throws ConfigError
// naming the key and listing the known keys when it is wrong.
void apply_setting(SimConfig& config, const std::string& assignment);
// Checks what single keys cannot: pfc.xon_offset <= a static pfc.xoff, ecn.min <= ecn.max, the
// MTU's range, and that each given key shapes the run ("dcqcn.rai does not apply to this run: it
// is for cc=dcqcn, and the run has cc=hpcc").
void check_config(const SimConfig& config);
// Scale mode (coarse > 0): the "packet" becomes a chunk of `coarse` bytes, and the
// thresholds that are counted in packets or sized for MTU packets grow with it (ACK per
// chunk, timeout >= 100 ms, PFC/ECN/drop thresholds and buffer at least a few chunks), so
// that a 1024-GPU training iteration of hundreds of GB runs in seconds. Then checks.
void finalize_config(SimConfig& config);
std::vector<ConfigKey> config_keys();
std::string describe_value(const SimConfig& config, const std::string& key);

// Quantities in configuration files and flags.
std::int64_t parse_bytes(const std::string& text, const std::string& what);   // util/size.h: 64K, 150KB, 4MiB
Time parse_time(const std::string& text, const std::string& what);             // 50us, 1ms
double parse_rate(const std::string& text, const std::string& what);           // 400G -> bit/s

}  // namespace weft::sim
