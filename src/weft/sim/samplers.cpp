#include "weft/sim/samplers.h"

namespace weft::sim {

void Samplers::sample(Time at, const Counters& total, const std::vector<Port, HugePageAllocator<Port>>& ports,
                      std::vector<QueuePair, HugePageAllocator<QueuePair>>& qps, const SimConfig& cfg, bool quiet) {
  counters_.push_back(CounterSample{at, total});
  const std::size_t previous = last_queue_rows_, rows = queues_.size();
  last_queue_rows_ = rows;
  if (quiet) {
    for (std::size_t i = previous; i < rows; ++i) {
      QueueSample again = queues_[i];  // (a copy: the push may move the rows)
      again.at = at;
      queues_.push_back(again);
    }
  } else if (cfg.mode != SimMode::kFlow) {
    // Flows in the flow-level mode queue nowhere: nothing to look for in 600,000 ports of a
    // 100,000-GPU fabric every 10 us.
    // A class with bytes queued holds packets: the port's backlog bits say which to read.
    for (std::size_t port = 0; port < ports.size(); ++port)
      for (unsigned classes = ports[port].backlog & 0xffu; classes != 0; classes &= classes - 1) {
        const int q = __builtin_ctz(classes);
        if (ports[port].c[q].queue_bytes > 0)
          queues_.push_back(QueueSample{at, static_cast<int>(port), q, ports[port].c[q].queue_bytes});
      }
  }
  if (!cfg.sample_qps) return;
  for (std::size_t i = 0; i < qps.size(); ++i) {
    QueuePair& q = qps[i];
    const std::int64_t bytes = q.delivered_bytes - q.sampled_delivered, cnps = q.cnps_received - q.sampled_cnps;
    if (bytes == 0 && cnps == 0 && q.rate == 0) continue;  // idle and not limited
    qps_.push_back(QpSample{at, static_cast<int>(i), bytes, cnps, q.rate, q.target, q.alpha, q.window,
                            cfg.cc == CongestionControl::kNscc ? q.nscc.rtt : q.swift.rtt, q.hpcc.utilization});
    q.sampled_delivered = q.delivered_bytes;
    q.sampled_cnps = q.cnps_received;
  }
}

}  // namespace weft::sim
