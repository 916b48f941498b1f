// The engine's run: windows, the threads' shards and their mail, the partition of the
// nodes (parallel_engine.h; docs/simulator.md, "Parallel engine").
#include "weft/sim/parallel_engine.h"

#include <algorithm>
#include <barrier>
#include <exception>
#include <thread>

#include "weft/util/error.h"

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

Engine::Engine(const Topology& topology, std::uint64_t seed) : topo_(topology), coord_(kinds_) {
  current_ = &coord_;
  const std::size_t N = topo_.nodes.size();
  // Each node's streams, seeded from the run's seed and the node's number.
  rng_.resize(N);
  for (std::size_t n = 0; n < N; ++n) {
    rng_[n].choice.state = splitmix(seed ^ splitmix(3 * n + 1));
    rng_[n].jitter.state = splitmix(seed ^ 0x6A09E667F3BCC908ull ^ splitmix(3 * n + 2));
    rng_[n].loss.state = splitmix(seed ^ 0xBB67AE8584CAA73Bull ^ splitmix(3 * n + 3));
  }
  // Nodes joined by a link without delay (an NVSwitch to its GPUs) run together; between
  // the others no node reaches another sooner than the smallest delay of their links: the
  // window (at most 1 us, so that a run ends soon after its last rank). A link's delay one
  // way is its own and its receiver's latency.
  atom_.resize(N);
  for (std::size_t n = 0; n < N; ++n) atom_[n] = static_cast<int>(n);
  auto root = [&](int n) {
    while (atom_[static_cast<std::size_t>(n)] != n) n = atom_[static_cast<std::size_t>(n)] = atom_[static_cast<std::size_t>(atom_[static_cast<std::size_t>(n)])];
    return n;
  };
  auto delay = [&](const Link& l, int receiver) { return l.delay + topo_.nodes[static_cast<std::size_t>(receiver)].latency; };
  for (const Link& l : topo_.links)
    if (delay(l, l.b) == 0 || delay(l, l.a) == 0) {
      const int a = root(l.a), b = root(l.b);
      if (a != b) atom_[static_cast<std::size_t>(std::max(a, b))] = std::min(a, b);
    }
  for (std::size_t n = 0; n < N; ++n) atom_[n] = root(static_cast<int>(n));
  window_ = kUs;
  for (const Link& l : topo_.links)
    if (atom_[static_cast<std::size_t>(l.a)] != atom_[static_cast<std::size_t>(l.b)])
      window_ = std::min({window_, delay(l, l.b), delay(l, l.a)});
  seq_.assign(N + 1, 0);
}

Engine::~Engine() = default;

std::uint32_t Engine::add_kind(void* part, RunFn run_fn, PrefetchFn prefetch_fn) {
  if (begun()) throw InternalError("simulator: an event kind added after the run began");
  kinds_.push_back(EventKind{part, run_fn, prefetch_fn});
  return static_cast<std::uint32_t>(kinds_.size() - 1);
}

void Engine::share_nodes(int threads) {
  node_shard_.assign(topo_.nodes.size(), 0);
  if (threads <= 1) return;
  // Each node's neighbours, a link's far end in the links' order.
  std::vector<std::vector<int>> near(topo_.nodes.size());
  for (const Link& l : topo_.links) {
    near[static_cast<std::size_t>(l.a)].push_back(l.b);
    near[static_cast<std::size_t>(l.b)].push_back(l.a);
  }
  // GPUs in rank order cut into equal runs; then, breadth first from the GPUs, each other
  // node joins the least loaded (by ports) of the shards of its neighbours met before it.
  // A fat tree's pods stay whole and its core switches are dealt out.
  std::vector<std::int64_t> load(static_cast<std::size_t>(threads), 0);
  std::vector<int> level(topo_.nodes.size(), -1);
  std::vector<int> frontier;
  const std::size_t G = topo_.gpus.size();
  for (std::size_t r = 0; r < G; ++r) {
    const int n = topo_.gpus[r];
    const int s = static_cast<int>(r * static_cast<std::size_t>(threads) / G);
    node_shard_[static_cast<std::size_t>(n)] = s;
    level[static_cast<std::size_t>(n)] = 0;
    load[static_cast<std::size_t>(s)] += static_cast<std::int64_t>(near[static_cast<std::size_t>(n)].size());
    frontier.push_back(n);
  }
  for (int depth = 1; !frontier.empty(); ++depth) {
    std::vector<int> next;
    for (int n : frontier)
      for (int m : near[static_cast<std::size_t>(n)]) {
        if (level[static_cast<std::size_t>(m)] >= 0) continue;
        level[static_cast<std::size_t>(m)] = depth;
        next.push_back(m);
      }
    for (int m : next) {
      int best = -1;
      for (int k : near[static_cast<std::size_t>(m)]) {
        if (level[static_cast<std::size_t>(k)] < 0 || level[static_cast<std::size_t>(k)] >= depth) continue;
        const int s = node_shard_[static_cast<std::size_t>(k)];
        if (best < 0 || load[static_cast<std::size_t>(s)] < load[static_cast<std::size_t>(best)]) best = s;
      }
      node_shard_[static_cast<std::size_t>(m)] = best < 0 ? 0 : best;
      load[static_cast<std::size_t>(node_shard_[static_cast<std::size_t>(m)])] +=
          static_cast<std::int64_t>(near[static_cast<std::size_t>(m)].size());
    }
    frontier = std::move(next);
  }
  // Nodes joined without delay go where the first of them went.
  for (std::size_t n = 0; n < atom_.size(); ++n) node_shard_[n] = node_shard_[static_cast<std::size_t>(atom_[n])];
}

void Engine::begin(int threads) {
  if (begun()) throw InternalError("simulator: a run begins once");
  threads = std::max(1, std::min<int>(threads, static_cast<int>(topo_.nodes.size())));
  share_nodes(threads);
  for (int i = 0; i < threads; ++i) {
    shards_.push_back(std::make_unique<Shard>(kinds_));
    shards_.back()->index = i;
  }
  coord_.index = threads;
  coord_.outbox.assign(static_cast<std::size_t>(threads), {});
  for (auto& s : shards_) s->outbox.assign(static_cast<std::size_t>(threads), {});
  current_ = &coord_;
}

// Windows of at most window_ from the earliest pending event, each shard running its
// nodes' events of the window (on threads of their own when there are several), then the
// events sent across shards delivered; events of the whole fabric run between windows,
// after the nodes' events of their time (the flow-level mode computes its rates once the
// sends of that time are posted).
Engine::End Engine::run(Time time_limit, const std::function<bool()>& finished, const std::function<void()>& after_window) {
  const std::size_t T = shards_.size();
  // Workers for shards 1..T-1; this thread runs shard 0 and the coordinator.
  std::barrier sync(static_cast<std::ptrdiff_t>(T));
  bool stop = false;
  std::vector<std::exception_ptr> errors(T);
  // A shard's part of a window, its error kept for this thread to throw after the window.
  auto guarded = [&](std::size_t i, void (Engine::*part)(Shard&)) {
    current_ = shards_[i].get();
    try {
      (this->*part)(*shards_[i]);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  auto window = [&](std::size_t i) { guarded(i, &Engine::run_window); };
  auto deliver = [&](std::size_t i) { guarded(i, &Engine::deliver_mail); };
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
  auto end_threads = [&] {
    stop = true;
    if (T > 1) sync.arrive_and_wait();
    for (auto& w : workers) w.join();
    current_ = &coord_;
  };
  // Windows run side by side while they hold at least this many events (a meeting of the
  // threads costs about as much as a few hundred events).
  constexpr std::uint64_t kSideBySide = 1024;
  std::uint64_t last_window_events = kSideBySide, shard_events_before = 0;
  End end = End::kFinished;
  try {
    for (;;) {
      current_ = &coord_;
      if (finished()) break;
      Time t_node = kNever;
      for (const auto& sp : shards_) t_node = std::min(t_node, sp->queue.next_time());
      const Time t_fabric = coord_.queue.next_time();
      const Time t = std::min(t_node, t_fabric);
      if (t == kNever) {  // nothing left to happen: a stall
        end = End::kNothingLeft;
        break;
      }
      if (t > time_limit) {
        end = End::kTimeLimit;
        break;
      }
      if (t_fabric < t_node) {
        while (coord_.queue.next_time() == t_fabric) coord_.queue.run_one();
        continue;
      }
      window_end_ = std::min({t_node + window_, after(t_fabric), after(time_limit)});
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
      current_ = &coord_;
      after_window();
    }
  } catch (...) {
    end_threads();
    throw;
  }
  end_threads();
  return end;
}

std::vector<std::uint64_t> Engine::events_per_thread() const {
  std::vector<std::uint64_t> events;
  for (const auto& sp : shards_) events.push_back(sp->queue.events_run());
  return events;
}

std::uint64_t Engine::events_run() const {
  std::uint64_t events = coord_.queue.events_run();
  for (const auto& sp : shards_) events += sp->queue.events_run();
  return events;
}

Time Engine::latest_node_time() const {
  Time at = 0;
  for (const auto& sp : shards_) at = std::max(at, sp->queue.now());
  return at;
}

Time Engine::end_time() const { return std::max(coord_.queue.now(), latest_node_time()); }

Counters Engine::counters() const {
  Counters sum = coord_.counters;
  for (const auto& sp : shards_) sum += sp->counters;
  return sum;
}

void Engine::run_window(Shard& s) {
  // (window_end_ is read each time: with one thread a fabric event scheduled by this
  // window's events cuts it at its time.)
  while (s.queue.run_one(window_end_)) {
  }
}

void Engine::deliver_mail(Shard& s) {
  for (const auto& from : shards_) {
    std::vector<Mail>& box = from->outbox[static_cast<std::size_t>(s.index)];
    for (const Mail& m : box) s.queue.schedule(m.at, m.key, m.node, m.kind, m.arg);
    box.clear();
  }
}

void Engine::schedule(Time at, int node, std::uint32_t kind, std::uint64_t arg) {
  Shard& me = shard();
  const int acting = me.queue.node();
  const std::uint64_t key = static_cast<std::uint64_t>(acting + 1) << 40 | seq_[static_cast<std::size_t>(acting + 1)]++;
  if (node < 0) {
    if (&me != &coord_ && shards_.size() > 1) throw InternalError("simulator: a fabric event scheduled by a node with several threads");
    coord_.queue.schedule(at, key, -1, kind, arg);
    window_end_ = std::min(window_end_, after(at));
    return;
  }
  const int to = node_shard_[static_cast<std::size_t>(node)];
  if (to == me.index) me.queue.schedule(at, key, node, kind, arg);
  else if (&me == &coord_) shards_[static_cast<std::size_t>(to)]->queue.schedule(at, key, node, kind, arg);
  else if (at < window_end_) throw InternalError("simulator: an event for another thread's node within the window");
  else me.outbox[static_cast<std::size_t>(to)].push_back(Mail{at, key, arg, kind, node});
}

}  // namespace weft::sim
