// The agents of a workload: each runs its steps in order. A step starts after its compute
// gap, posts its sends and completes when every send went on the wire (or, with
// rdma.send_done=acked, is acknowledged) and every expected receive has arrived; messages
// from one agent to another match in order.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <unistd.h>

#include "weft/sim/network.h"
#include "weft/util/error.h"
#include "weft/util/progress.h"

namespace weft::sim {

void Network::start_agents() {
  agents_.assign(work_.agents.size(), AgentState{});
  collective_times_.assign(work_.collectives.size(), {kNever, 0});
  agents_left_ = 0;
  // One flow record per send: reserved at once, so that millions of records (a traced
  // iteration) are not copied as the table grows.
  std::size_t sends = 0;
  for (const Agent& agent : work_.agents)
    for (const WorkStep& step : agent.steps) sends += step.sends.size();
  flows_.reserve(flows_.size() + sends);
  for (std::size_t a = 0; a < work_.agents.size(); ++a) {
    const Agent& agent = work_.agents[a];
    if (agent.gpu < 0 || agent.gpu >= static_cast<int>(topo_.gpus.size()))
      throw ConfigError("workload: rank " + std::to_string(agent.rank) + " is placed on GPU " + std::to_string(agent.gpu) +
                        ", but the topology has " + std::to_string(topo_.gpus.size()) + " GPUs");
    if (agent.steps.empty()) {
      agents_[a].done = true;
      continue;
    }
    ++agents_left_;
    events_.schedule(agent.start + agent.steps[0].gap, this, kStepStart, a);
  }
}

void Network::step_start(int a) {
  AgentState& st = agents_[a];
  const WorkStep& step = work_.agents[a].steps[st.step];
  const Time now = events_.now();
  st.started = true;
  st.step_began = now;
  if (step.collective >= 0) {
    // A collective's time starts before the launch that precedes a rank's first step of it.
    const bool first = st.step == 0 || work_.agents[a].steps[st.step - 1].collective != step.collective;
    auto& t = collective_times_[step.collective];
    t.first = std::min(t.first, now - (first ? work_.collectives[step.collective].launch : 0));
  }
  st.pending = static_cast<int>(step.sends.size() + step.recvs.size());
  st.posting = true;
  for (const Transfer& s : step.sends) {
    if (s.bytes == 0 && work_.agents[static_cast<std::size_t>(s.peer)].gpu == work_.agents[a].gpu) {
      // An order between two agents on one GPU (workload_build.h's release and gather, a
      // Chakra dependency): no traffic and no flow record, done at once.
      agent_hears(s.peer, a);
      --st.pending;
      continue;
    }
    int flow = static_cast<int>(flows_.size());
    FlowRecord f;
    f.src_agent = a;
    f.dst_agent = s.peer;
    f.src_gpu = work_.agents[a].gpu;
    f.dst_gpu = work_.agents[s.peer].gpu;
    f.bytes = s.bytes;
    f.start = now;
    f.collective = step.collective;
    flows_.push_back(f);
    post_message(flow, a, s.peer, s.bytes);
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
  const Time now = events_.now();
  int coll = agent.steps[st.step].collective;
  if (coll >= 0) collective_times_[coll].second = std::max(collective_times_[coll].second, now);
  ++st.step;
  if (st.step >= agent.steps.size()) {
    st.done = true;
    --agents_left_;
    finish_ = std::max(finish_, now);
    return;
  }
  events_.schedule(now + agent.steps[st.step].gap, this, kStepStart, static_cast<std::uint64_t>(a));
}

void Network::message_delivered(int flow) {
  FlowRecord& f = flows_[flow];
  if (--f.parts_left_rx > 0) return;
  f.delivered = events_.now();
  // With a GPU protocol, the receiving GPU sees the message when it sees its flag (a switch's
  // reducer works on the data as it arrives; a relay forwards it; within a GPU there is none).
  const Time ready = f.collective >= 0 ? work_.collectives[f.collective].ready : 0;
  if (ready > 0 && f.src_gpu != f.dst_gpu && f.dst_gpu < topo_.gpu_count() && !work_.agents[f.dst_agent].relay) {
    events_.schedule(events_.now() + ready, this, kMessageReady, static_cast<std::uint64_t>(flow));
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
  f.acked = events_.now();
  if (cfg_.send_done == SendDone::kAcked) send_step_done(f.src_agent);
}

void Network::send_step_done(int agent) {
  AgentState& st = agents_[agent];
  if (--st.pending == 0 && !st.posting) advance_agent(agent);
}

int Network::agents_unfinished() const { return agents_left_; }

bool Network::run(bool progress) {
  auto t0 = std::chrono::steady_clock::now();
  // Progress: the workload's bytes delivered, or the simulated time against the time limit
  // when that is further along (a workload that never finishes).
  std::int64_t total_bytes = 0;
  for (const Agent& a : work_.agents)
    for (const WorkStep& s : a.steps)
      for (const Transfer& t : s.sends) total_bytes += t.bytes;
  Progress bar("sim", 1000, stderr, 5.0, false);
  while (agents_left_ > 0 && !events_.empty()) {
    if (!events_.run_one()) break;
    if (events_.now() > cfg_.time_limit) break;
    if (progress && (events_.events_run() & 0xFFFF) == 0) {
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double by_bytes = total_bytes > 0 ? static_cast<double>(counters_.bytes_delivered) / static_cast<double>(total_bytes) : 0;
      const double by_time = static_cast<double>(events_.now()) / static_cast<double>(std::max<Time>(cfg_.time_limit, 1));
      const double done = std::min(0.999, std::max(by_bytes, by_time));
      char detail[128];
      std::snprintf(detail, sizeof detail, "%.1f us simulated, %.2f M events/s, %d ranks running", to_us(events_.now()),
                    static_cast<double>(events_.events_run()) / std::max(wall, 1e-9) / 1e6, agents_left_);
      bar.update(static_cast<long>(done * 1000), done > 0 ? wall / done * (1 - done) : -1, detail);
    }
  }
  bar.finish();
  wall_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (agents_left_ == 0) return true;
  finish_ = events_.now();
  stall_ = find_stall(events_.now() > cfg_.time_limit);
  return false;
}

}  // namespace weft::sim
