// A simulation run: the parts wired, checked and prepared, run once on the engine, and
// their outcome merged (network.h).
#include "weft/sim/network.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "weft/sim/pxn.h"
#include "weft/util/error.h"
#include "weft/util/progress.h"

namespace weft::sim {
namespace {

SimConfig finalized(SimConfig c) {
  finalize_config(c);
  return c;
}

}  // namespace

Network::Network(const Topology& topology, const SimConfig& config, Workload workload)
    : topo_(topology), work_(std::move(workload)), cfg_(finalized(config)), engine_(topo_, cfg_.seed),
      fabric_(engine_, pool_, nic_, topo_, cfg_, work_.failures), nic_(engine_, pool_, fabric_, agents_, topo_, cfg_, work_),
      flow_(engine_, fabric_, nic_, agents_, topo_, cfg_), agents_(engine_, nic_, flow_, topo_, cfg_, work_) {
  if (cfg_.pxn) pxn_relays_ = route_through_nvlink_peers(work_, topo_);
  Fabric::check_setup(topo_, cfg_, work_, fabric_.columns());
  fabric_.prepare();
  nic_.prepare();
  if (cfg_.mode == SimMode::kFlow) flow_.prepare();
  agents_.prepare();
  agents_left_ = agents_.started();
  kSample_ = engine_.add_kind(this, [](void* n, std::uint64_t) { static_cast<Network*>(n)->sample(); });
}

void Network::check_setup(const Topology& t, const SimConfig& c, const Workload& w) {
  Fabric::check_setup(t, c, w, RouteColumns::of(t));
}

void Network::capture(const std::string& node_a, const std::string& node_b, const std::string& pcap_path) {
  fabric_.capture().open(pcap_path, topo_.link_between(node_a, node_b, "pcap"));
}

int Network::begin_run() {
  int threads = cfg_.threads > 0 ? cfg_.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (threads > 1) {
    // What reads or changes another node's state at once runs on one thread.
    if (cfg_.mode == SimMode::kFlow) single_thread_reason_ = "the flow-level mode sets every flow's rate at once";
    else if (cfg_.lb == LoadBalancing::kAdaptive && cfg_.ar_remote) single_thread_reason_ = "ar.remote reads the next switch's queues at once";
    else if (fabric_.capture().active()) single_thread_reason_ = "a pcap capture reads the senders' queue pairs";
    if (!single_thread_reason_.empty()) threads = 1;
  }
  engine_.begin(threads);
  threads = engine_.threads();
  const int shards = threads + 1;  // and the coordinator's
  pool_.reset(shards, cfg_.cc == CongestionControl::kHpcc);
  fabric_.begin(shards);
  nic_.begin(shards);
  agents_.begin(shards);
  if (cfg_.sample_interval > 0) engine_.schedule(cfg_.sample_interval, -1, kSample_);
  return threads;
}

void Network::sample() {
  // (events_run() counts this sampling event: one more than at the previous sample means
  // nothing else ran in between.)
  const std::uint64_t events = engine_.events_run();
  samplers_.sample(Engine::now(), engine_.counters(), fabric_.ports(), nic_.qps(), cfg_, events == events_at_sample_ + 1);
  events_at_sample_ = events;
  if (agents_left_ > 0) engine_.schedule(Engine::now() + cfg_.sample_interval, -1, kSample_);
}

// The run ends at the end of the window in which the last rank finished, at the time limit,
// or when no event is left.
bool Network::run(bool progress) {
  if (engine_.begun()) throw InternalError("simulator: a network runs once");
  begin_run();
  const auto t0 = std::chrono::steady_clock::now();
  // Progress: the workload's bytes delivered, or the simulated time against the time limit
  // when that is further along (a workload that never finishes).
  std::int64_t total_bytes = 0;
  for (const Agent& a : work_.agents)
    for (const WorkStep& s : a.steps)
      for (const Transfer& t : s.sends) total_bytes += t.bytes;
  Progress bar("sim", 1000, stderr, 5.0, false);
  std::uint64_t events_at_report = 0;
  auto finished = [&] {
    agents_left_ = agents_.started() - agents_.done();
    peak_packets_ = std::max(peak_packets_, pool_.in_use());
    return agents_left_ == 0;
  };
  auto report = [&] {
    if (!progress) return;
    const std::uint64_t events = engine_.events_run();
    if (events - events_at_report < 0x10000) return;
    events_at_report = events;
    const Time at = engine_.latest_node_time();
    const std::int64_t delivered = engine_.counters().bytes_delivered;
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double by_bytes = total_bytes > 0 ? static_cast<double>(delivered) / static_cast<double>(total_bytes) : 0;
    const double by_time = static_cast<double>(at) / static_cast<double>(std::max<Time>(cfg_.time_limit, 1));
    const double part = std::min(0.999, std::max(by_bytes, by_time));
    char detail[128];
    std::snprintf(detail, sizeof detail, "%.1f us simulated, %.2f M events/s, %d ranks running", to_us(at),
                  static_cast<double>(events) / std::max(wall, 1e-9) / 1e6, agents_left_);
    bar.update(static_cast<long>(part * 1000), part > 0 ? wall / part * (1 - part) : -1, detail);
  };
  const Engine::End end = engine_.run(cfg_.time_limit, finished, report);
  const bool time_limit = end == Engine::End::kTimeLimit;
  bar.finish();
  wall_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The flows in flight at the end: their bytes so far, on their links and in the counters.
  if (cfg_.mode == SimMode::kFlow && agents_left_ != 0) flow_.settle(time_limit ? cfg_.time_limit : engine_.end_time());
  counters_ = engine_.counters();
  pfc_events_ = fabric_.pfc_events();
  collective_times_ = agents_.collective_times();
  finish_ = agents_.finish();
  if (agents_left_ == 0) return true;
  finish_ = time_limit ? cfg_.time_limit : engine_.end_time();  // simulated up to the limit; or until nothing was left
  // The records of sends never posted go (they were made before the run, in step order).
  agents_.drop_unposted();
  stall_ = find_stall(*this, time_limit);
  return false;
}

}  // namespace weft::sim
