// Every parameter of a simulation, with its default, as one table: `--set key=value`
// changes any of them, `weft sim --list-keys` prints them, docs/simulator.md explains
// where each default comes from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/sim/engine.h"

namespace weft::sim {

enum class LoadBalancing : std::uint8_t { kEcmp, kFlowlet, kSpray };
enum class SprayMode : std::uint8_t { kRandom, kRoundRobin, kLeastLoaded };
enum class CongestionControl : std::uint8_t { kDcqcn, kNone };
enum class WriteMode : std::uint8_t { kFirstMiddleLast, kWriteOnly };
enum class Retransmit : std::uint8_t { kGoBackN, kSelective };
enum class HashFunction : std::uint8_t { kCrc32, kXor };

struct SimConfig {
  std::uint64_t seed = 1;

  // Traffic classes (seed 002 chapter 11): RoCE data in DSCP 24 -> queue 3, CNPs in
  // DSCP 48 -> strict-priority queue 7.
  int roce_dscp = 24, roce_queue = 3;
  int cnp_dscp = 48, cnp_queue = 7;
  int strict_queue = 7;              // queues >= this are strict priority, the rest DWRR
  double dwrr_weight[8] = {1, 1, 1, 1, 1, 1, 1, 1};

  // Switch buffers and marking.
  std::int64_t buffer_bytes = 32LL << 20;     // shared buffer per switch
  std::int64_t wred_min = 150'000;            // seed 002 ch. 11: 150 KB
  std::int64_t wred_max = 3'000'000;          //                  3000 KB
  double wred_pmax = 0.01;                    // DCQCN paper: 1 %
  std::int64_t drop_threshold = 4'000'000;    // per egress queue (lossy traffic)
  bool ecn = true;

  // PFC (per ingress port and priority).
  bool pfc = true;
  std::int64_t pfc_xoff = 400'000;
  std::int64_t pfc_xon = 100'000;
  std::int64_t pfc_headroom = 0;              // 0: 2 x (link bytes in flight) + 3 frames
  int pfc_quanta = 0xFFFF;                    // pause quanta, 512 bit times each
  Time pfc_watchdog = 100 * kMs;              // 0: no watchdog

  // RoCEv2 transport.
  std::int64_t mtu = 4096;                    // RDMA payload per packet
  std::int64_t coarse = 0;                    // > 0: simulate in chunks of this many bytes (scale mode)
  WriteMode write_mode = WriteMode::kFirstMiddleLast;
  Retransmit retransmit = Retransmit::kGoBackN;
  int ack_every = 16;                         // coalesced ACK every k in-order packets
  Time rto = 1 * kMs;
  int qps_per_connection = 1;

  // Congestion control: DCQCN (Zhu et al., SIGCOMM 2015) reaction and notification points.
  CongestionControl cc = CongestionControl::kDcqcn;
  Time cnp_interval = 50 * kUs;
  double dcqcn_g = 1.0 / 256;
  Time dcqcn_alpha_timer = 55 * kUs;
  Time dcqcn_rate_timer = 55 * kUs;
  std::int64_t dcqcn_byte_counter = 10'000'000;
  int dcqcn_f = 5;
  double dcqcn_rai = 40e6;                    // additive increase, bit/s
  double dcqcn_rhai = 400e6;                  // hyper increase, bit/s
  double dcqcn_min_rate = 100e6;              // bit/s

  // Load balancing.
  LoadBalancing lb = LoadBalancing::kEcmp;
  HashFunction hash = HashFunction::kCrc32;
  bool distinct_seeds = true;                 // false: every switch hashes with one seed
  SprayMode spray = SprayMode::kRandom;
  Time flowlet_gap = 20 * kUs;

  // Reports.
  Time sample_interval = 10 * kUs;            // queue occupancy samples (0: none)
  Time time_limit = 10 * kSec;                // simulated time before giving up
  std::string pcap_link;                      // "a:b" node names: capture that link
};

struct ConfigKey {
  std::string key, kind, help;
};

// Applies "key=value" (units accepted: 4096, 150KB, 4MiB, 50us, 400G); throws ConfigError
// naming the key and listing the known keys when it is wrong.
void apply_setting(SimConfig& config, const std::string& assignment);
// Checks what single keys cannot: pfc.xon <= pfc.xoff, ecn.min <= ecn.max, the MTU's range.
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
