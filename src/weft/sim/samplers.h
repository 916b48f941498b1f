// What a run counts and logs, and an observer of the simulated fabric that samples it over
// time: the counters of every shard (merged), the PFC frames sent, and at each sampling
// interval the counters so far (counters.csv), every class queue holding bytes (queues.csv;
// none in the flow-level mode, where nothing queues) and, with sample.qps, each queue pair's
// delivered bytes, CNPs and congestion-control state over the interval (qps.csv).
#pragma once

#include <cstdint>
#include <vector>

#include "weft/sim/config.h"
#include "weft/sim/huge_pages.h"
#include "weft/sim/port.h"
#include "weft/sim/queue_pair.h"

namespace weft::sim {

struct PfcEvent {
  Time at;
  int port;       // the port that sent the frame
  int queue;
  bool pause;     // false: resume
};

struct Counters {
  std::int64_t ecn_marks = 0, cnps = 0, pauses = 0, resumes = 0, drops = 0, headroom_drops = 0;
  std::int64_t retransmissions = 0, naks = 0, timeouts = 0, duplicates = 0;
  std::int64_t out_of_order = 0;  // arrivals ahead of a missing PSN that the receiver had to drop or hold
  std::int64_t reordered = 0;     // Write-Only arrivals ahead of a missing PSN, placed directly
  std::int64_t watchdog_storms = 0, lost_on_failure = 0, data_packets = 0;
  std::int64_t corrupted = 0;     // frames lost on the wire (link.loss, link.ber)
  std::int64_t trimmed = 0;       // data packets whose payload a switch cut (packet trimming)
  std::int64_t bytes_sent = 0, bytes_delivered = 0;
  Counters& operator+=(const Counters& o);
};

// The counters at a sampling time (counters.csv: ECN marks, CNPs and pauses over time).
struct CounterSample {
  Time at;
  Counters counters;
};

// One QP over one sampling interval (sample.qps): what it delivered and its DCQCN state.
struct QpSample {
  Time at;
  int qp;
  std::int64_t delivered_bytes;  // during the interval
  std::int64_t cnps;             // CNPs the sender received during the interval
  double rate, target, alpha;    // DCQCN at the sample (rate 0: not limited); rate: any pacing
  double window;                 // window congestion control: bytes (0: none)
  Time rtt;                      // Swift, NSCC: the last round trip measured
  double utilization;            // HPCC: U
};

struct QueueSample {
  Time at;
  int port;
  int queue;
  std::int64_t bytes;
};

class Samplers {
 public:
  // One sampling time `at`: `total` the counters so far, the ports' queues, the queue pairs'
  // intervals (each queue pair's totals at this sample kept for the next). `quiet`: no event
  // has run since the previous sample, so the ports hold what they held then and their rows
  // are that sample's again (no look at every port: a fabric waiting out a retransmission
  // timeout or a trace's compute gap costs a row per interval, not a pass over its ports).
  void sample(Time at, const Counters& total, const std::vector<Port, HugePageAllocator<Port>>& ports,
              std::vector<QueuePair, HugePageAllocator<QueuePair>>& qps, const SimConfig& cfg, bool quiet);
  const std::vector<QueueSample>& queues() const { return queues_; }
  const std::vector<CounterSample>& counters() const { return counters_; }
  const std::vector<QpSample>& qps() const { return qps_; }

 private:
  std::vector<QueueSample> queues_;
  std::size_t last_queue_rows_ = 0;  // where the previous sample's rows of queues_ begin
  std::vector<CounterSample> counters_;
  std::vector<QpSample> qps_;
};

}  // namespace weft::sim
