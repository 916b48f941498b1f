// The agents of a workload: each runs its steps in order. A step starts after its compute
// gap, posts its sends and completes when every send went on the wire (or, with
// rdma.send_done=acked, is acknowledged) and every expected receive has arrived; messages
// from one agent to another match in order.
#include <fmt/format.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <exception>
#include <limits>
#include <thread>
#include <unistd.h>

#include "weft/sim/network.h"
#include "weft/util/error.h"
#include "weft/util/progress.h"

namespace weft::sim {

// A send between two agents on one GPU with no bytes is an order between them (workload_build.h's
// release and gather, a Chakra dependency): no traffic and no flow record.
static bool is_order(const Workload& w, int from, const Transfer& s) {
  return s.bytes == 0 && w.agents[static_cast<std::size_t>(s.peer)].gpu == w.agents[static_cast<std::size_t>(from)].gpu;
}

void Network::make_sends() {
  std::size_t sends = 0, steps = 0;
  for (const Agent& agent : work_.agents) {
    steps += agent.steps.size();
    for (const WorkStep& step : agent.steps) sends += step.sends.size();
  }
  flows_.reserve(sends);
  step_base_.reserve(work_.agents.size());
  first_flow_.reserve(steps);
  for (std::size_t a = 0; a < work_.agents.size(); ++a) {
    const Agent& agent = work_.agents[a];
    step_base_.push_back(first_flow_.size());
    for (const WorkStep& step : agent.steps) {
      first_flow_.push_back(static_cast<int>(flows_.size()));
      for (const Transfer& s : step.sends) {
        if (is_order(work_, static_cast<int>(a), s)) continue;
        if (flows_.size() == static_cast<std::size_t>(std::numeric_limits<int>::max()))
          throw ConfigError(fmt::format("workload: more than the {} sends a run can record", std::numeric_limits<int>::max()));
        const int flow = static_cast<int>(flows_.size());
        FlowRecord& f = flows_.emplace_back();
        f.src_agent = static_cast<int>(a);
        f.dst_agent = s.peer;
        f.src_gpu = agent.gpu;
        f.dst_gpu = work_.agents[static_cast<std::size_t>(s.peer)].gpu;
        f.bytes = s.bytes;
        f.start = kNever;  // not posted yet
        f.collective = step.collective;
        // Not done: each part is counted off when it is posted.
        f.parts_left_rx = f.parts_left_tx = f.parts_left_sent = 1;
        if (f.src_gpu == f.dst_gpu) continue;  // no network traffic, no QP
        for_each_part(s.bytes, [&](int i, std::int64_t pk, std::int64_t part_bytes) {
          QueuePair& q = qps_[static_cast<std::size_t>(qp_for(static_cast<int>(a), s.peer, i))];
          if (cfg_.mode == SimMode::kFlow) return;
          QpMessage m{q.psn_planned, q.psn_planned + static_cast<std::uint32_t>(pk), part_bytes, flow};
          q.psn_planned = m.psn_end;
          q.rx.push_back(m);
        });
      }
    }
  }
}

void Network::start_agents() {
  agents_.assign(work_.agents.size(), AgentState{});
  collective_times_.assign(work_.collectives.size(), {kNever, 0});
  for (std::size_t a = 0; a < work_.agents.size(); ++a) {
    const Agent& agent = work_.agents[a];
    if (agent.gpu < 0 || agent.gpu >= static_cast<int>(topo_.gpus.size()))
      throw ConfigError("workload: rank " + std::to_string(agent.rank) + " is placed on GPU " + std::to_string(agent.gpu) +
                        ", but the topology has " + std::to_string(topo_.gpus.size()) + " GPUs");
    for (const WorkStep& step : agent.steps)
      for (const Transfer& t : step.sends)
        if (t.peer < 0 || t.peer >= static_cast<int>(work_.agents.size()))
          throw ConfigError("workload: rank " + std::to_string(agent.rank) + " sends to an unknown rank");
  }
  make_sends();
  for (std::size_t a = 0; a < work_.agents.size(); ++a)
    if (work_.agents[a].steps.empty()) agents_[a].done = true;
    else ++agents_started_;
  agents_left_ = agents_started_;
}

void Network::schedule_agent_starts() {
  for (std::size_t a = 0; a < work_.agents.size(); ++a) {
    const Agent& agent = work_.agents[a];
    if (!agent.steps.empty()) schedule(agent.start + agent.steps[0].gap, agent_node(static_cast<int>(a)), kStepStart, a);
  }
}

void Network::step_start(int a) {
  AgentState& st = agents_[a];
  const WorkStep& step = work_.agents[a].steps[st.step];
  const Time now = clock();
  st.started = true;
  st.step_began = now;
  if (step.collective >= 0) {
    // A collective's time starts before the launch that precedes a rank's first step of it.
    const bool first = st.step == 0 || work_.agents[a].steps[st.step - 1].collective != step.collective;
    auto& t = sh().collective_times[static_cast<std::size_t>(step.collective)];
    t.first = std::min(t.first, now - (first ? work_.collectives[step.collective].launch : 0));
  }
  st.pending = static_cast<int>(step.sends.size() + step.recvs.size());
  st.posting = true;
  int flow = first_flow_[step_base_[static_cast<std::size_t>(a)] + st.step];
  for (const Transfer& s : step.sends) {
    if (is_order(work_, a, s)) {  // done at once
      agent_hears(s.peer, a);
      --st.pending;
      continue;
    }
    flows_[static_cast<std::size_t>(flow)].start = now;
    post_message(flow++, a, s.peer, s.bytes);
  }
  for (const Transfer& r : step.recvs) {
    auto arrived = st.arrived.find(r.peer);
    if (arrived != st.arrived.end() && arrived->second > 0) {
      --arrived->second;
      --st.pending;
    } else {
      ++st.waiting[r.peer];
    }
  }
  st.posting = false;
  if (st.pending == 0) advance_agent(a);
}

void Network::advance_agent(int a) {
  AgentState& st = agents_[a];
  const Agent& agent = work_.agents[a];
  const Time now = clock();
  int coll = agent.steps[st.step].collective;
  if (coll >= 0) {
    auto& t = sh().collective_times[static_cast<std::size_t>(coll)];
    t.second = std::max(t.second, now);
  }
  ++st.step;
  if (st.step >= agent.steps.size()) {
    st.done = true;
    ++sh().agents_done;
    sh().finish = std::max(sh().finish, now);
    return;
  }
  schedule(now + agent.steps[st.step].gap, agent_node(a), kStepStart, static_cast<std::uint64_t>(a));
}

void Network::message_delivered(int flow) {
  FlowRecord& f = flows_[flow];
  if (--f.parts_left_rx > 0) return;
  f.delivered = clock();
  // With a GPU protocol, the receiving GPU sees the message when it sees its flag (a switch's
  // reducer works on the data as it arrives; a relay forwards it; within a GPU there is none).
  const Time ready = f.collective >= 0 ? work_.collectives[f.collective].ready : 0;
  if (ready > 0 && f.src_gpu != f.dst_gpu && f.dst_gpu < topo_.gpu_count() && !work_.agents[f.dst_agent].relay) {
    schedule(clock() + ready, agent_node(f.dst_agent), kMessageReady, static_cast<std::uint64_t>(flow));
    return;
  }
  message_ready(flow);
}

void Network::message_ready(int flow) { agent_hears(flows_[flow].dst_agent, flows_[flow].src_agent); }

void Network::agent_hears(int dst_agent, int src_agent) {
  AgentState& st = agents_[dst_agent];
  auto waiting = st.waiting.find(src_agent);
  if (waiting != st.waiting.end() && waiting->second > 0) {
    --waiting->second;
    if (--st.pending == 0 && !st.posting) advance_agent(dst_agent);
  } else {
    ++st.arrived[src_agent];
  }
}

void Network::message_sent(int flow) {
  FlowRecord& f = flows_[flow];
  if (--f.parts_left_sent > 0) return;
  if (cfg_.send_done == SendDone::kSent) send_step_done(f.src_agent);
}

void Network::message_acked(int flow) {
  FlowRecord& f = flows_[flow];
  if (--f.parts_left_tx > 0) return;
  f.acked = clock();
  if (cfg_.send_done == SendDone::kAcked) send_step_done(f.src_agent);
}

void Network::send_step_done(int agent) {
  AgentState& st = agents_[agent];
  if (--st.pending == 0 && !st.posting) advance_agent(agent);
}

int Network::agents_unfinished() const { return agents_left_; }

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
      agents_left_ = agents_started_ - done;
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
  if (fluid_ && agents_left_ != 0) {
    // The flows in flight at the end: their bytes so far, on their links and in the counters.
    Time end = coord_.queue.now();
    for (const auto& sp : shards_) end = std::max(end, sp->queue.now());
    fluid_->settle_all(time_limit ? cfg_.time_limit : end);
  }
  merge_shards();
  if (agents_left_ == 0) return true;
  finish_ = time_limit ? cfg_.time_limit : end_time_;  // simulated up to the limit; or until nothing was left
  // The records of sends never posted go (they were made before the run, in step order).
  flows_.erase(std::remove_if(flows_.begin(), flows_.end(), [](const FlowRecord& f) { return f.start == kNever; }), flows_.end());
  stall_ = find_stall(time_limit);
  return false;
}

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
