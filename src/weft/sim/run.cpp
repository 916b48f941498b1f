// The run of a Network: time windows of at most the smallest link delay, each thread's
// shard running its nodes' events of the window, the events one shard sends another
// delivered between windows (its mail), events of the whole fabric on the coordinator, the
// shards' counters and records merged at the end (docs/simulator.md, "Parallel engine").
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <exception>
#include <thread>

#include "weft/sim/network.h"
#include "weft/util/error.h"
#include "weft/util/progress.h"

namespace weft::sim {

Counters& Counters::operator+=(const Counters& o) {
  ecn_marks += o.ecn_marks;
  cnps += o.cnps;
  pauses += o.pauses;
  resumes += o.resumes;
  drops += o.drops;
  headroom_drops += o.headroom_drops;
  retransmissions += o.retransmissions;
  naks += o.naks;
  timeouts += o.timeouts;
  duplicates += o.duplicates;
  out_of_order += o.out_of_order;
  reordered += o.reordered;
  watchdog_storms += o.watchdog_storms;
  lost_on_failure += o.lost_on_failure;
  data_packets += o.data_packets;
  corrupted += o.corrupted;
  trimmed += o.trimmed;
  bytes_sent += o.bytes_sent;
  bytes_delivered += o.bytes_delivered;
  return *this;
}

// The run: windows of at most window_ (the smallest link delay) from the earliest pending
// event, each shard running its nodes' events of the window (on threads of their own when
// there are several), then the events sent across shards delivered; events of the whole
// fabric run between windows, after the nodes' events of their time (the flow-level mode
// computes its rates once the sends of that time are posted). The run ends at the end of
// the window in which the last rank finished, at the time limit, or when no event is left.
bool Network::run(bool progress) {
  if (ran_) throw InternalError("simulator: a network runs once");
  ran_ = true;
  begin_run();
  const auto t0 = std::chrono::steady_clock::now();
  // Progress: the workload's bytes delivered, or the simulated time against the time limit
  // when that is further along (a workload that never finishes).
  std::int64_t total_bytes = 0;
  for (const Agent& a : work_.agents)
    for (const WorkStep& s : a.steps)
      for (const Transfer& t : s.sends) total_bytes += t.bytes;
  Progress bar("sim", 1000, stderr, 5.0, false);
  const std::size_t T = shards_.size();
  // Workers for shards 1..T-1; this thread runs shard 0 and the coordinator.
  std::barrier sync(static_cast<std::ptrdiff_t>(T));
  bool stop = false;
  std::vector<std::exception_ptr> errors(T);
  // A shard's part of a window, its error kept for this thread to throw after the window.
  auto guarded = [&](std::size_t i, void (Network::*part)(Shard&)) {
    current_ = shards_[i].get();
    try {
      (this->*part)(*shards_[i]);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  auto window = [&](std::size_t i) { guarded(i, &Network::run_window); };
  auto deliver = [&](std::size_t i) { guarded(i, &Network::deliver_mail); };
  std::vector<std::thread> workers;
  for (std::size_t i = 1; i < T; ++i)
    workers.emplace_back([&, i] {
      for (;;) {
        sync.arrive_and_wait();  // a window is set, or the run is over
        if (stop) return;
        window(i);
        sync.arrive_and_wait();
        deliver(i);
        sync.arrive_and_wait();
      }
    });
  auto rethrow = [&] {
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  };
  bool time_limit = false;
  std::uint64_t events_at_report = 0;
  // Windows run side by side while they hold at least this many events (a meeting of the
  // threads costs about as much as a few hundred events).
  constexpr std::uint64_t kSideBySide = 1024;
  std::uint64_t last_window_events = kSideBySide, shard_events_before = 0;
  try {
    for (;;) {
      current_ = &coord_;
      int done = coord_.agents_done;
      for (const auto& sp : shards_) done += sp->agents_done;
      agents_left_ = agents_.started() - done;
      peak_packets_ = std::max(peak_packets_, pool_.in_use());
      if (agents_left_ == 0) break;
      Time t_node = kNever;
      for (const auto& sp : shards_) t_node = std::min(t_node, sp->queue.next_time());
      const Time t_fabric = coord_.queue.next_time();
      const Time t = std::min(t_node, t_fabric);
      if (t == kNever) break;  // nothing left to happen: a stall
      if (t > cfg_.time_limit) {
        time_limit = true;
        break;
      }
      if (t_fabric < t_node) {
        while (coord_.queue.next_time() == t_fabric) coord_.queue.run_one();
        continue;
      }
      window_end_ = std::min({t_node + window_, after(t_fabric), after(cfg_.time_limit)});
      if (T == 1) {
        window(0);
        // (one thread: a fabric event scheduled meanwhile cuts the window)
      } else if (last_window_events < kSideBySide) {
        // The last window was too small to be worth the threads' meeting: this thread runs
        // the shards one after another (the same events in the same order on each).
        for (std::size_t i = 0; i < T; ++i) window(i);
        for (std::size_t i = 0; i < T; ++i) deliver(i);
      } else {
        ++windows_side_by_side_;
        sync.arrive_and_wait();
        window(0);
        sync.arrive_and_wait();
        deliver(0);
        sync.arrive_and_wait();
      }
      rethrow();
      ++windows_;
      std::uint64_t shard_events = 0;
      for (const auto& sp : shards_) shard_events += sp->queue.events_run();
      last_window_events = shard_events - shard_events_before;
      shard_events_before = shard_events;
      if (progress) {
        const std::uint64_t events = coord_.queue.events_run() + shard_events;
        if (events - events_at_report >= 0x10000) {
          events_at_report = events;
          Time at = 0;
          for (const auto& sp : shards_) at = std::max(at, sp->queue.now());
          std::int64_t delivered = coord_.counters.bytes_delivered;
          for (const auto& sp : shards_) delivered += sp->counters.bytes_delivered;
          const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          const double by_bytes = total_bytes > 0 ? static_cast<double>(delivered) / static_cast<double>(total_bytes) : 0;
          const double by_time = static_cast<double>(at) / static_cast<double>(std::max<Time>(cfg_.time_limit, 1));
          const double part = std::min(0.999, std::max(by_bytes, by_time));
          char detail[128];
          std::snprintf(detail, sizeof detail, "%.1f us simulated, %.2f M events/s, %d ranks running", to_us(at),
                        static_cast<double>(events) / std::max(wall, 1e-9) / 1e6, agents_left_);
          bar.update(static_cast<long>(part * 1000), part > 0 ? wall / part * (1 - part) : -1, detail);
        }
      }
    }
  } catch (...) {
    stop = true;
    if (T > 1) sync.arrive_and_wait();
    for (auto& w : workers) w.join();
    current_ = &coord_;
    throw;
  }
  stop = true;
  if (T > 1) sync.arrive_and_wait();
  for (auto& w : workers) w.join();
  current_ = &coord_;
  bar.finish();
  wall_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (cfg_.mode == SimMode::kFlow && agents_left_ != 0) {
    // The flows in flight at the end: their bytes so far, on their links and in the counters.
    Time end = coord_.queue.now();
    for (const auto& sp : shards_) end = std::max(end, sp->queue.now());
    flow_.settle(time_limit ? cfg_.time_limit : end);
  }
  merge_shards();
  if (agents_left_ == 0) return true;
  finish_ = time_limit ? cfg_.time_limit : end_time_;  // simulated up to the limit; or until nothing was left
  // The records of sends never posted go (they were made before the run, in step order).
  agents_.drop_unposted();
  stall_ = find_stall(*this, time_limit);
  return false;
}

int Network::agents_unfinished() const { return agents_left_; }

std::vector<std::uint64_t> Network::events_per_thread() const {
  std::vector<std::uint64_t> events;
  for (const auto& sp : shards_) events.push_back(sp->queue.events_run());
  return events;
}

void Network::run_window(Shard& s) {
  // (window_end_ is read each time: with one thread a fabric event scheduled by this
  // window's events cuts it at its time.)
  while (s.queue.run_one(window_end_)) {
  }
}

void Network::deliver_mail(Shard& s) {
  for (const auto& from : shards_) {
    std::vector<Mail>& box = from->outbox[static_cast<std::size_t>(s.index)];
    for (const Mail& m : box) s.queue.schedule(m.at, m.key, m.node, this, m.kind, m.arg);
    box.clear();
  }
}

void Network::schedule(Time at, int node, std::uint32_t kind, std::uint64_t arg) {
  Shard& me = sh();
  const int acting = me.queue.node();
  const std::uint64_t key = static_cast<std::uint64_t>(acting + 1) << 40 | seq_[static_cast<std::size_t>(acting + 1)]++;
  if (node < 0) {
    if (&me != &coord_ && shards_.size() > 1) throw InternalError("simulator: a fabric event scheduled by a node with several threads");
    coord_.queue.schedule(at, key, -1, this, kind, arg);
    window_end_ = std::min(window_end_, after(at));
    return;
  }
  const int to = node_shard_[static_cast<std::size_t>(node)];
  if (to == me.index) me.queue.schedule(at, key, node, this, kind, arg);
  else if (&me == &coord_) shards_[static_cast<std::size_t>(to)]->queue.schedule(at, key, node, this, kind, arg);
  else if (at < window_end_) throw InternalError("simulator: an event for another thread's node within the window");
  else me.outbox[static_cast<std::size_t>(to)].push_back(Mail{at, key, arg, kind, node});
}

void Network::merge_shards() {
  counters_ = Counters{};
  std::vector<PfcEvent> pfc;
  collective_times_.assign(work_.collectives.size(), {kNever, 0});
  finish_ = 0;
  events_run_ = 0;
  end_time_ = 0;
  auto merge = [&](Shard& s) {
    counters_ += s.counters;
    pfc.insert(pfc.end(), s.pfc_events.begin(), s.pfc_events.end());
    for (std::size_t c = 0; c < collective_times_.size(); ++c) {
      collective_times_[c].first = std::min(collective_times_[c].first, s.collective_times[c].first);
      collective_times_[c].second = std::max(collective_times_[c].second, s.collective_times[c].second);
    }
    finish_ = std::max(finish_, s.finish);
    events_run_ += s.queue.events_run();
    end_time_ = std::max(end_time_, s.queue.now());
  };
  merge(coord_);
  for (const auto& sp : shards_) merge(*sp);
  std::stable_sort(pfc.begin(), pfc.end(), [](const PfcEvent& a, const PfcEvent& b) {
    return a.at != b.at ? a.at < b.at : a.port != b.port ? a.port < b.port : a.queue < b.queue;
  });
  pfc_events_ = std::move(pfc);
}

}  // namespace weft::sim
