#include "weft/sim/agents.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "weft/sim/network.h"
#include "weft/util/error.h"

namespace weft::sim {

// A send between two agents on one GPU with no bytes is an order between them (workload_build.h's
// release and gather, a Chakra dependency): no traffic and no flow record.
static bool is_order(const Workload& w, int from, const Transfer& s) {
  return s.bytes == 0 && w.agents[static_cast<std::size_t>(s.peer)].gpu == w.agents[static_cast<std::size_t>(from)].gpu;
}

Agents::Agents(Network& net, const Topology& topo, const SimConfig& cfg, const Workload& work)
    : net_(net), topo_(topo), cfg_(cfg), work_(work) {}

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
        net_.for_each_part(s.bytes, [&](int i, std::int64_t pk, std::int64_t part_bytes) {
          QueuePair& q = net_.qps_[static_cast<std::size_t>(net_.qp_for(static_cast<int>(a), s.peer, i))];
          if (cfg_.mode == SimMode::kFlow) return;
          QpMessage m{q.psn_planned, q.psn_planned + static_cast<std::uint32_t>(pk), part_bytes, flow};
          q.psn_planned = m.psn_end;
          q.rx.push_back(m);
        });
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

void Agents::schedule_starts() {
  for (std::size_t a = 0; a < work_.agents.size(); ++a) {
    const Agent& agent = work_.agents[a];
    if (!agent.steps.empty())
      net_.schedule(agent.start + agent.steps[0].gap, node_of(static_cast<int>(a)), Network::kStepStart, a);
  }
}

void Agents::step_start(int a) {
  AgentState& st = state_[static_cast<std::size_t>(a)];
  const WorkStep& step = work_.agents[a].steps[st.step];
  const Time now = net_.clock();
  st.started = true;
  st.step_began = now;
  if (step.collective >= 0) {
    // A collective's time starts before the launch that precedes a rank's first step of it.
    const bool first = st.step == 0 || work_.agents[a].steps[st.step - 1].collective != step.collective;
    auto& t = net_.sh().collective_times[static_cast<std::size_t>(step.collective)];
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
    net_.post_message(flow++, a, s.peer, s.bytes);
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
  const Time now = net_.clock();
  int coll = agent.steps[st.step].collective;
  if (coll >= 0) {
    auto& t = net_.sh().collective_times[static_cast<std::size_t>(coll)];
    t.second = std::max(t.second, now);
  }
  ++st.step;
  if (st.step >= agent.steps.size()) {
    st.done = true;
    ++net_.sh().agents_done;
    net_.sh().finish = std::max(net_.sh().finish, now);
    return;
  }
  net_.schedule(now + agent.steps[st.step].gap, node_of(a), Network::kStepStart, static_cast<std::uint64_t>(a));
}

void Agents::message_delivered(int flow) {
  FlowRecord& f = flows_[static_cast<std::size_t>(flow)];
  if (--f.parts_left_rx > 0) return;
  f.delivered = net_.clock();
  // With a GPU protocol, the receiving GPU sees the message when it sees its flag (a switch's
  // reducer works on the data as it arrives; a relay forwards it; within a GPU there is none).
  const Time ready = f.collective >= 0 ? work_.collectives[f.collective].ready : 0;
  if (ready > 0 && f.src_gpu != f.dst_gpu && f.dst_gpu < topo_.gpu_count() && !work_.agents[f.dst_agent].relay) {
    net_.schedule(net_.clock() + ready, node_of(f.dst_agent), Network::kMessageReady, static_cast<std::uint64_t>(flow));
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
  f.acked = net_.clock();
  if (cfg_.send_done == SendDone::kAcked) send_step_done(f.src_agent);
}

void Agents::send_step_done(int agent) {
  AgentState& st = state_[static_cast<std::size_t>(agent)];
  if (--st.pending == 0 && !st.posting) advance(agent);
}

void Agents::drop_unposted() {
  flows_.erase(std::remove_if(flows_.begin(), flows_.end(), [](const FlowRecord& f) { return f.start == kNever; }), flows_.end());
}

}  // namespace weft::sim
