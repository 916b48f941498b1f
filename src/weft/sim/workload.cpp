#include "weft/sim/workload.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>

#include "weft/algo/collective_facts.h"
#include "weft/algo/registry.h"
#include "weft/sim/config.h"
#include "weft/sim/workload_build.h"
#include "weft/util/error.h"
#include "weft/util/parse.h"
#include "weft/util/file.h"

namespace weft::sim {

// Appends one rank's program as steps; `agent_of` maps the program's peers to agents.
void append_program(Agent& agent, const algo::Program& p, std::int64_t element_bytes, const std::vector<int>& agent_of,
                    int collective, Time gap) {
  bool first = true;
  for (const algo::Step& s : p.steps) {
    WorkStep ws;
    ws.collective = collective;
    for (const algo::Op& op : s.ops) {
      if (op.kind == algo::OpKind::kSend) ws.sends.push_back({agent_of[op.peer], op.src.count * element_bytes});
      else if (op.kind == algo::OpKind::kRecv || op.kind == algo::OpKind::kRecvReduce)
        ws.recvs.push_back({agent_of[op.peer], op.dst.count * element_bytes});
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

std::vector<int> all_gpus(const Topology& t) {
  std::vector<int> g(t.gpus.size());
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
  std::vector<std::string> out;
  std::size_t pos = 0;
  for (;;) {
    std::size_t next = s.find(sep, pos);
    out.push_back(s.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
    if (next == std::string::npos) return out;
    pos = next + 1;
  }
}

// What a workload may hold: each step of each rank costs about kBytesPerStep of memory.
constexpr double kMaxWorkloadSteps = 50e6, kBytesPerStep = 100;

void add_collective(Workload& w, const std::string& collective, const std::string& algorithm, std::int64_t bytes,
                    const std::vector<int>& gpus, int gpus_per_host, Time start, int iterations) {
  algo::Collective c = algo::parse_collective(collective);
  int world = static_cast<int>(gpus.size());
  if (world < 1) throw ConfigError("collective " + collective + ": no GPUs");
  if (bytes % 4 != 0) throw ConfigError("collective size " + std::to_string(bytes) + " bytes is not a whole number of f32 elements");
  std::int64_t n = c == algo::Collective::kBarrier ? 0 : bytes / 4;
  algo::Options opts;
  opts.local_world = gpus_per_host > 1 && world % gpus_per_host == 0 ? gpus_per_host : 0;
  int base = add_job(w, collective + "/" + algorithm, gpus, start);
  std::vector<int> agent_of(world);
  for (int r = 0; r < world; ++r) agent_of[r] = base + r;
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
    int ci = static_cast<int>(w.collectives.size());
    w.collectives.push_back({collective + "/" + algorithm, w.agents[base].job, world, bytes, algo::busbw_factor(c, world)});
    for (int r = 0; r < world; ++r) {
      algo::Program p = algo::build_program(c, algorithm, r, world, n, opts);
      append_program(w.agents[base + r], p, 4, agent_of, ci, 0);
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

Workload load_unchecked(const std::string& spec, const Topology& t, std::uint64_t seed) {
  Workload w;
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
         (a.stream > 0 ? " stream " + std::to_string(a.stream) : std::string());
}

Workload load_workload(const std::string& spec, const Topology& t, std::uint64_t seed) {
  Workload w = load_unchecked(spec, t, seed);
  check_messages_match(w);
  return w;
}

}  // namespace weft::sim
