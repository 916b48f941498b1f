#include "weft/sim/agents.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "weft/sim/flow_transport.h"
#include "weft/sim/nic.h"
#include "weft/util/error.h"

namespace weft::sim {

// A send between two agents on one GPU with no bytes is an order between them (workload_build.h's
// release and gather, a Chakra dependency): no traffic and no flow record.
static bool is_order(const Workload& w, int from, const Transfer& s) {
  return s.bytes == 0 && w.agents[static_cast<std::size_t>(s.peer)].gpu == w.agents[static_cast<std::size_t>(from)].gpu;
}

Agents::Agents(Engine& engine, Nic& nic, FlowTransport& flow, const Topology& topo, const SimConfig& cfg, const Workload& work)
    : eng_(engine), nic_(nic), flow_(flow), topo_(topo), cfg_(cfg), work_(work) {
  kStepStart = eng_.add_kind(this, [](void* a, std::uint64_t arg) { static_cast<Agents*>(a)->step_start(static_cast<int>(arg)); });
  kMessageReady = eng_.add_kind(this, [](void* a, std::uint64_t arg) { static_cast<Agents*>(a)->message_ready(static_cast<int>(arg)); });
}

int Agents::node_of(int agent) const { return topo_.gpus[static_cast<std::size_t>(work_.agents[static_cast<std::size_t>(agent)].gpu)]; }

void Agents::make_sends() {
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
        nic_.expect(flow, static_cast<int>(a), s.peer, s.bytes);
      }
    }
  }
}

void Agents::prepare() {
  state_.assign(work_.agents.size(), AgentState{});
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
    if (work_.agents[a].steps.empty()) state_[a].done = true;
    else ++started_;
}

void Agents::begin(int shards) {
  per_thread_.assign(static_cast<std::size_t>(shards), PerThread{});
  for (PerThread& t : per_thread_) t.collective_times.assign(work_.collectives.size(), {kNever, 0});
  for (std::size_t a = 0; a < work_.agents.size(); ++a) {
    const Agent& agent = work_.agents[a];
    if (!agent.steps.empty())
      eng_.schedule(agent.start + agent.steps[0].gap, node_of(static_cast<int>(a)), kStepStart, a);
  }
}

void Agents::step_start(int a) {
  AgentState& st = state_[static_cast<std::size_t>(a)];
  const WorkStep& step = work_.agents[a].steps[st.step];
  const Time now = eng_.now();
  st.started = true;
  st.step_began = now;
  if (step.collective >= 0) {
    // A collective's time starts before the launch that precedes a rank's first step of it.
    const bool first = st.step == 0 || work_.agents[a].steps[st.step - 1].collective != step.collective;
    auto& t = mine().collective_times[static_cast<std::size_t>(step.collective)];
    t.first = std::min(t.first, now - (first ? work_.collectives[step.collective].launch : 0));
  }
  st.pending = static_cast<int>(step.sends.size() + step.recvs.size());
  st.posting = true;
  int flow = first_flow_[step_base_[static_cast<std::size_t>(a)] + st.step];
  for (const Transfer& s : step.sends) {
    if (is_order(work_, a, s)) {  // done at once
      hears(s.peer, a);
      --st.pending;
      continue;
    }
    flows_[static_cast<std::size_t>(flow)].start = now;
    post(flow++, a, s.peer, s.bytes);
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
  if (st.pending == 0) advance(a);
}

void Agents::advance(int a) {
  AgentState& st = state_[static_cast<std::size_t>(a)];
  const Agent& agent = work_.agents[a];
  const Time now = eng_.now();
  int coll = agent.steps[st.step].collective;
  if (coll >= 0) {
    auto& t = mine().collective_times[static_cast<std::size_t>(coll)];
    t.second = std::max(t.second, now);
  }
  ++st.step;
  if (st.step >= agent.steps.size()) {
    st.done = true;
    ++mine().done;
    mine().finish = std::max(mine().finish, now);
    return;
  }
  eng_.schedule(now + agent.steps[st.step].gap, node_of(a), kStepStart, static_cast<std::uint64_t>(a));
}

void Agents::message_delivered(int flow) {
  FlowRecord& f = flows_[static_cast<std::size_t>(flow)];
  if (--f.parts_left_rx > 0) return;
  f.delivered = eng_.now();
  // With a GPU protocol, the receiving GPU sees the message when it sees its flag (a switch's
  // reducer works on the data as it arrives; a relay forwards it; within a GPU there is none).
  const Time ready = f.collective >= 0 ? work_.collectives[f.collective].ready : 0;
  if (ready > 0 && f.src_gpu != f.dst_gpu && f.dst_gpu < topo_.gpu_count() && !work_.agents[f.dst_agent].relay) {
    eng_.schedule(eng_.now() + ready, node_of(f.dst_agent), kMessageReady, static_cast<std::uint64_t>(flow));
    return;
  }
  message_ready(flow);
}

void Agents::message_ready(int flow) {
  const FlowRecord& f = flows_[static_cast<std::size_t>(flow)];
  hears(f.dst_agent, f.src_agent);
}

void Agents::hears(int dst_agent, int src_agent) {
  AgentState& st = state_[static_cast<std::size_t>(dst_agent)];
  auto waiting = st.waiting.find(src_agent);
  if (waiting != st.waiting.end() && waiting->second > 0) {
    --waiting->second;
    if (--st.pending == 0 && !st.posting) advance(dst_agent);
  } else {
    ++st.arrived[src_agent];
  }
}

void Agents::message_sent(int flow) {
  FlowRecord& f = flows_[static_cast<std::size_t>(flow)];
  if (--f.parts_left_sent > 0) return;
  if (cfg_.send_done == SendDone::kSent) send_step_done(f.src_agent);
}

void Agents::message_acked(int flow) {
  FlowRecord& f = flows_[static_cast<std::size_t>(flow)];
  if (--f.parts_left_tx > 0) return;
  f.acked = eng_.now();
  if (cfg_.send_done == SendDone::kAcked) send_step_done(f.src_agent);
}

void Agents::send_step_done(int agent) {
  AgentState& st = state_[static_cast<std::size_t>(agent)];
  if (--st.pending == 0 && !st.posting) advance(agent);
}

void Agents::post(int flow, int src_agent, int dst_agent, std::int64_t bytes) {
  FlowRecord& f = flows_[static_cast<std::size_t>(flow)];
  if (f.src_gpu == f.dst_gpu) {
    // Same GPU: no network traffic.
    f.parts_left_rx = f.parts_left_tx = f.parts_left_sent = 1;
    message_delivered(flow);
    message_sent(flow);
    message_acked(flow);
    return;
  }
  const int parts = parts_of(cfg_, bytes);
  f.parts_left_rx = f.parts_left_tx = f.parts_left_sent = f.parts = parts;
  if (cfg_.mode == SimMode::kFlow) flow_.post(flow, src_agent, dst_agent, bytes, parts);
  else nic_.post(flow, src_agent, dst_agent, bytes);
}

int Agents::done() const {
  int done = 0;
  for (const PerThread& t : per_thread_) done += t.done;
  return done;
}

Time Agents::finish() const {
  Time finish = 0;
  for (const PerThread& t : per_thread_) finish = std::max(finish, t.finish);
  return finish;
}

std::vector<std::pair<Time, Time>> Agents::collective_times() const {
  std::vector<std::pair<Time, Time>> times(work_.collectives.size(), {kNever, 0});
  for (const PerThread& t : per_thread_)
    for (std::size_t c = 0; c < times.size(); ++c) {
      times[c].first = std::min(times[c].first, t.collective_times[c].first);
      times[c].second = std::max(times[c].second, t.collective_times[c].second);
    }
  return times;
}

void Agents::drop_unposted() {
  flows_.erase(std::remove_if(flows_.begin(), flows_.end(), [](const FlowRecord& f) { return f.start == kNever; }), flows_.end());
}

}  // namespace weft::sim
