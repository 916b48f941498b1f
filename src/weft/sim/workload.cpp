#include "weft/sim/workload.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <random>

#include "weft/algo/collective_facts.h"
#include "weft/algo/registry.h"
#include "weft/sim/config.h"
#include "weft/sim/in_network.h"
#include "weft/sim/workload_build.h"
#include "weft/util/error.h"
#include "weft/util/parse.h"
#include "weft/util/file.h"

namespace weft::sim {

// Appends one rank's program as steps; `agent_of` maps the program's peers to agents.
void append_program(Agent& agent, const algo::Program& p, std::int64_t element_bytes,
                    const std::vector<std::vector<int>>& agents_of, int collective, Time gap,
                    std::optional<algo::Protocol> protocol, int channel) {
  auto bytes = [&](const algo::Chunk& c) {
    return protocol ? algo::wire_bytes(*protocol, c.count * element_bytes) : c.count * element_bytes;
  };
  bool first = true;
  for (const algo::Step& s : p.steps) {
    WorkStep ws;
    ws.collective = collective;
    for (const algo::Op& op : s.ops) {
      if (channel >= 0 && op.channel != channel) continue;
      const std::vector<int>& agent_of = agents_of[channel >= 0 ? op.peer_channel : 0];
      if (op.kind == algo::OpKind::kSend) ws.sends.push_back({agent_of[op.peer], bytes(op.src)});
      else if (op.kind == algo::OpKind::kRecv || op.kind == algo::OpKind::kRecvReduce)
        ws.recvs.push_back({agent_of[op.peer], bytes(op.dst)});
    }
    if (ws.sends.empty() && ws.recvs.empty()) continue;  // local copies and reductions only
    if (first) ws.gap = gap;
    first = false;
    agent.steps.push_back(std::move(ws));
  }
  if (first && gap > 0) {
    // A program without traffic (world 1) still spends the compute gap.
    WorkStep ws;
    ws.gap = gap;
    ws.collective = collective;
    agent.steps.push_back(ws);
  }
}

void release(Workload& w, int first, const std::vector<int>& others, Time gap) {
  WorkStep go;
  go.gap = gap;
  for (int o : others) {
    go.sends.push_back({o, 0});
    WorkStep wait;
    wait.recvs.push_back({first, 0});
    w.agents[static_cast<std::size_t>(o)].steps.push_back(wait);
  }
  w.agents[static_cast<std::size_t>(first)].steps.push_back(go);
}

void gather(Workload& w, int first, const std::vector<int>& others) {
  WorkStep hear;
  for (int o : others) {
    hear.recvs.push_back({o, 0});
    WorkStep done;
    done.sends.push_back({first, 0});
    w.agents[static_cast<std::size_t>(o)].steps.push_back(done);
  }
  w.agents[static_cast<std::size_t>(first)].steps.push_back(hear);
}

std::vector<int> all_gpus(const Topology& t) {
  std::vector<int> g(static_cast<std::size_t>(t.gpu_count()));
  std::iota(g.begin(), g.end(), 0);
  return g;
}

int add_job(Workload& w, const std::string& name, const std::vector<int>& gpus, Time start) {
  int job = static_cast<int>(w.jobs.size());
  w.jobs.push_back(name);
  for (std::size_t r = 0; r < gpus.size(); ++r) {
    Agent a;
    a.job = job;
    a.rank = static_cast<int>(r);
    a.gpu = gpus[r];
    a.start = start;
    w.agents.push_back(std::move(a));
  }
  return static_cast<int>(w.agents.size() - gpus.size());
}

std::vector<std::string> split_fields(const std::string& s, char sep) {
  const auto fields = split_list(s, sep, std::numeric_limits<std::size_t>::max());
  return {fields->begin(), fields->end()};
}

// What a workload may hold: each step of each rank costs about kBytesPerStep of memory.
constexpr double kMaxWorkloadSteps = 50e6, kBytesPerStep = 100;

algo::CostInputs cost_inputs(const Topology& t, const std::vector<int>& gpus) {
  algo::CostInputs in;
  in.ranks = static_cast<int>(gpus.size());
  const std::vector<GpuAttachment> attached = gpu_attachments(t);
  std::vector<int> hosts;
  double net = 0, nvlink = 0;
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    const GpuAttachment& a = attached[static_cast<std::size_t>(gpus[i])];
    hosts.push_back(t.nodes[static_cast<std::size_t>(t.gpus[static_cast<std::size_t>(gpus[i])])].host);
    net = i == 0 ? a.network_bps : std::min(net, a.network_bps);
    nvlink = i == 0 ? a.nvlink_bps : std::min(nvlink, a.nvlink_bps);
  }
  std::sort(hosts.begin(), hosts.end());
  in.hosts = static_cast<int>(std::unique(hosts.begin(), hosts.end()) - hosts.begin());
  in.net_gbps = net / 8e9;
  in.nvlink_gbps = nvlink / 8e9;
  in.in_network = t.in_network_reduction();
  return in;
}

CollectiveChoice choose(algo::Collective c, const std::string& spec, std::int64_t bytes, const Topology& t,
                        const std::vector<int>& gpus) {
  CollectiveChoice out{spec, std::nullopt, 0, 0, 0};
  if (spec == "auto") {
    const algo::CollectiveCost best = algo::cheapest_collective(c, bytes, cost_inputs(t, gpus));
    out.algorithm = best.algorithm;
    out.protocol = best.protocol;
    out.predicted_us = best.time_us;
  } else if (const auto slash = spec.find('/'); slash != std::string::npos) {
    out.algorithm = spec.substr(0, slash);
    if (out.algorithm == "auto") throw ConfigError("'" + spec + "': auto picks the protocol too (write auto alone)");
    out.protocol = algo::parse_protocol(spec.substr(slash + 1));
  }
  if (out.protocol) {
    // The GPU's own costs: the launch, and seeing a message's flag after its last byte
    // lands: NCCL's ring NVLink step latency (its network steps add the fabric's time, which
    // the simulator models; its tree figures for simple are a 256 KB chunk's whole time).
    out.launch = from_us(algo::protocol_latency(*out.protocol, out.algorithm).launch_us);
    out.ready = from_us(algo::protocol_latency(*out.protocol, "ring").nvlink_step_us);
  }
  return out;
}

int rings_per_rail(const Workload& w, std::int64_t bytes, int local_world, std::optional<algo::Protocol> protocol) {
  const int rails = std::max(local_world, 1);
  return std::max(1, algo::channels_for_bytes(bytes, rails * w.channels_per_nic, protocol.value_or(algo::Protocol::kSimple)) / rails);
}

std::string CollectiveChoice::name(algo::Collective c) const {
  return std::string(algo::collective_name(c)) + "/" + algorithm +
         (protocol ? std::string("/") + algo::protocol_name(*protocol) : "");
}

ChannelAgents::ChannelAgents(Workload& w, int base, int ranks) : w_(w), base_(base), of_(1, std::vector<int>(ranks)) {
  for (int r = 0; r < ranks; ++r) of_[0][static_cast<std::size_t>(r)] = base + r;
}

void ChannelAgents::cover(const algo::Program& p) {
  while (of_.size() < algo::channel_count(p)) {
    std::vector<int> mine(of_[0].size());
    for (std::size_t r = 0; r < mine.size(); ++r) {
      Agent a = w_.agents[static_cast<std::size_t>(base_) + r];
      a.steps.clear();
      a.channel = static_cast<int>(of_.size());
      mine[r] = static_cast<int>(w_.agents.size());
      w_.agents.push_back(std::move(a));
    }
    of_.push_back(std::move(mine));
  }
}

void ChannelAgents::join() {
  if (of_.size() < 2) return;
  for (std::size_t r = 0; r < of_[0].size(); ++r) {
    std::vector<int> others;
    for (std::size_t ch = 1; ch < of_.size(); ++ch) others.push_back(of_[ch][r]);
    gather(w_, of_[0][r], others);
    release(w_, of_[0][r], others);
  }
}

void add_collective(Workload& w, const std::string& collective, const std::string& algorithm_spec, std::int64_t bytes,
                    const std::vector<int>& gpus, const Topology& topology, Time start, int iterations) {
  algo::Collective c = algo::parse_collective(collective);
  int world = static_cast<int>(gpus.size());
  if (world < 1) throw ConfigError("collective " + collective + ": no GPUs");
  if (bytes % 4 != 0)
    throw ConfigError("collective " + collective + ": " + std::to_string(bytes) + (bytes == 1 ? " byte" : " bytes") +
                      " is not a whole number of 4-byte f32 elements");
  std::int64_t n = c == algo::Collective::kBarrier ? 0 : bytes / 4;
  const CollectiveChoice choice = choose(c, algorithm_spec, bytes, topology, gpus);
  const std::string name = choice.name(c);
  const int gpus_per_host = topology.gpus_per_host;
  algo::Options opts;
  opts.local_world = gpus_per_host > 1 && world % gpus_per_host == 0 ? gpus_per_host : 0;
  opts.channels_per_rail = rings_per_rail(w, bytes, opts.local_world, choice.protocol);
  // The in-network all-reduce runs on the GPUs and the reducers of their switches.
  std::optional<InNetworkAllReduce> in_network;
  if (choice.algorithm == "in_network") {
    if (c != algo::Collective::kAllReduce) throw ConfigError("the in_network algorithm is an allreduce, not " + collective);
    in_network = in_network_allreduce(topology, gpus, n);
  }
  const std::vector<int>& placed = in_network ? in_network->gpus : gpus;
  const int ranks = static_cast<int>(placed.size());
  const int base = add_job(w, name, placed, start);
  ChannelAgents agents(w, base, ranks);
  std::int64_t steps_before = 0;
  for (const Agent& a : w.agents) steps_before += static_cast<std::int64_t>(a.steps.size());
  for (int it = 0; it < iterations; ++it) {
    if (it == 1) {  // the first iteration tells what all of them will hold: refuse before building them
      std::int64_t steps = -steps_before;
      for (const Agent& a : w.agents) steps += static_cast<std::int64_t>(a.steps.size());
      const double total = static_cast<double>(steps) * iterations;
      if (total > kMaxWorkloadSteps)
        throw ConfigError(fmt::format("collective {}: {} iterations of {} steps would hold {:.3g} steps (about {:.0f} GB) "
                                      "in memory, over the limit of {:.0f} million: use fewer iterations",
                                      collective, iterations, steps, total, total * kBytesPerStep / 1e9,
                                      kMaxWorkloadSteps / 1e6));
    }
    if (it > 0) agents.join();
    const int ci = static_cast<int>(w.collectives.size());
    w.collectives.push_back({name, w.agents[static_cast<std::size_t>(base)].job, world, bytes, algo::busbw_factor(c, world),
                             choice.launch, choice.ready, choice.predicted_us});
    for (int r = 0; r < ranks; ++r) {
      const algo::Program p = in_network ? in_network->programs[static_cast<std::size_t>(r)]
                                         : algo::build_program(c, choice.algorithm, r, world, n, opts);
      agents.cover(p);
      const auto& of = agents.of();
      for (std::size_t ch = 0; ch < of.size(); ++ch)
        append_program(w.agents[static_cast<std::size_t>(of[ch][static_cast<std::size_t>(r)])], p, 4, of, ci, choice.launch,
                       choice.protocol, of.size() > 1 ? static_cast<int>(ch) : -1);
    }
  }
}

namespace {

std::string ordinal(std::size_t n) {
  const char* suffix = (n % 100 >= 11 && n % 100 <= 13) ? "th" : n % 10 == 1 ? "st" : n % 10 == 2 ? "nd" : n % 10 == 3 ? "rd" : "th";
  return std::to_string(n) + suffix;
}

// Messages between two agents match in order: the k-th send from a to b is the k-th receive
// at b from a, and must carry the bytes the receive expects, or the simulation would end
// without finishing (or finish with the wrong traffic) and blame nobody.
void check_messages_match(const Workload& w) {
  std::map<std::pair<int, int>, std::vector<std::int64_t>> sent, expected;  // (from, to) -> bytes in order
  for (std::size_t a = 0; a < w.agents.size(); ++a) {
    for (const WorkStep& s : w.agents[a].steps) {
      for (const Transfer& t : s.sends) sent[{static_cast<int>(a), t.peer}].push_back(t.bytes);
      for (const Transfer& t : s.recvs) expected[{t.peer, static_cast<int>(a)}].push_back(t.bytes);
    }
  }
  auto name = [&](int a) { return agent_name(w, a); };
  for (const auto& [pair, sends] : sent) {
    const auto& recvs = expected[pair];
    for (std::size_t k = 0; k < std::max(sends.size(), recvs.size()); ++k) {
      if (k < sends.size() && k < recvs.size() && sends[k] == recvs[k]) continue;
      const std::string what = name(pair.first) + "'s " + ordinal(k + 1) + " message to " + name(pair.second);
      if (k >= recvs.size())
        throw ConfigError("workload: " + what + " (" + std::to_string(sends[k]) + " bytes) is never received");
      if (k >= sends.size())
        throw ConfigError("workload: " + name(pair.second) + " expects a " + ordinal(k + 1) + " message from " +
                          name(pair.first) + " (" + std::to_string(recvs[k]) + " bytes) that is never sent");
      throw ConfigError("workload: " + what + " carries " + std::to_string(sends[k]) + " bytes, the receive expects " +
                        std::to_string(recvs[k]));
    }
  }
  for (const auto& [pair, recvs] : expected) {
    if (!recvs.empty() && !sent.count(pair))
      throw ConfigError("workload: " + name(pair.second) + " expects " + std::to_string(recvs.size()) +
                        " message(s) from " + name(pair.first) + " that are never sent");
  }
}

Workload load_unchecked(const std::string& spec, const Topology& t, std::uint64_t seed, int channels_per_nic) {
  Workload w;
  w.channels_per_nic = channels_per_nic;
  if (spec.empty()) throw ConfigError("--workload is empty");
  if (is_directory(spec)) {
    add_trace(w, spec, t, true, {});
    return w;
  }
  auto ends_with = [&](const char* suffix) {
    std::string s = suffix;
    return spec.size() > s.size() && spec.compare(spec.size() - s.size(), s.size(), s) == 0;
  };
  if (ends_with(".yaml") || ends_with(".yml")) {
    if (!file_exists(spec)) throw ConfigError("workload file " + spec + " does not exist");
    load_job_file(w, spec, t, seed);
    return w;
  }
  add_spec(w, spec, t, seed);
  return w;
}

}  // namespace

std::string agent_name(const Workload& w, int agent) {
  const Agent& a = w.agents[static_cast<std::size_t>(agent)];
  return (w.jobs.size() > 1 ? "job " + std::to_string(a.job) + " " : std::string()) + "rank " + std::to_string(a.rank) +
         (a.stream > 0 ? " stream " + std::to_string(a.stream) : std::string()) +
         (a.channel > 0 ? " channel " + std::to_string(a.channel) : std::string()) +
         (a.relay ? " (its PXN relay on GPU " + std::to_string(a.gpu) + ")" : std::string());
}

Workload load_workload(const std::string& spec, const Topology& t, std::uint64_t seed, int channels_per_nic) {
  if (channels_per_nic < 1) throw ConfigError("channels per NIC must be at least 1, got " + std::to_string(channels_per_nic));
  Workload w = load_unchecked(spec, t, seed, channels_per_nic);
  check_messages_match(w);
  // The steps grew by doubling: give back the slack before the run's own arrays are made.
  for (Agent& a : w.agents) a.steps.shrink_to_fit();
  return w;
}

}  // namespace weft::sim
