// Workloads from a spec on the command line: a collective through the algo schedules, or a
// synthetic pattern (permutation, incast, a single flow).
#include <algorithm>
#include <numeric>
#include <random>

#include "weft/algo/collective_facts.h"
#include "weft/algo/registry.h"
#include "weft/sim/config.h"
#include "weft/sim/workload_build.h"
#include "weft/util/error.h"
#include "weft/util/parse.h"

namespace weft::sim {

std::vector<int> parse_gpu_list(const std::string& text, int gpus, const std::string& where) {
  std::vector<int> out;
  for (const std::string& part : split_fields(text, ',')) {
    const auto dash = part.find('-');
    const auto a = parse_integer(std::string_view(part).substr(0, dash));
    const auto b = dash == std::string::npos ? a : parse_integer(std::string_view(part).substr(dash + 1));
    if (!a || !b) throw ConfigError(where + ": '" + part + "' is not a GPU range (e.g. 0-15 or 0,2,4)");
    if (*a < 0 || *b < *a || *b >= gpus)
      throw ConfigError(where + ": GPUs '" + part + "' out of range (the topology has GPUs 0-" + std::to_string(gpus - 1) + ")");
    for (auto g = *a; g <= *b; ++g) out.push_back(static_cast<int>(g));
  }
  std::vector<int> sorted = out;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    throw ConfigError(where + ": a GPU appears twice in '" + text + "'");
  return out;
}

void add_pattern(Workload& w, const std::string& pattern, std::int64_t bytes, std::vector<int> gpus, Time start,
                 std::uint64_t seed, int senders, const std::string& where) {
  if (pattern == "permutation") {
    if (gpus.size() < 2) throw ConfigError(where + ": a permutation needs at least 2 GPUs");
    // A random derangement: every GPU sends to one other and receives from one other.
    std::vector<int> perm(gpus.size());
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937_64 rng(seed);
    for (;;) {
      std::shuffle(perm.begin(), perm.end(), rng);
      bool ok = true;
      for (std::size_t i = 0; i < perm.size(); ++i) ok = ok && perm[i] != static_cast<int>(i);
      if (ok) break;
    }
    int base = add_job(w, "permutation", gpus, start);
    std::vector<int> from(gpus.size());
    for (std::size_t i = 0; i < perm.size(); ++i) from[perm[i]] = static_cast<int>(i);
    for (std::size_t i = 0; i < gpus.size(); ++i) {
      WorkStep s;
      s.sends.push_back({base + perm[i], bytes});
      s.recvs.push_back({base + from[i], bytes});
      w.agents[base + i].steps.push_back(s);
    }
  } else if (pattern == "incast") {
    if (senders < 1) throw ConfigError(where + ": incast needs at least one sender");
    if (gpus.size() < static_cast<std::size_t>(senders) + 1)
      throw ConfigError(where + ": incast of " + std::to_string(senders) + " senders needs " + std::to_string(senders + 1) +
                        " GPUs, the list has " + std::to_string(gpus.size()));
    gpus.resize(senders + 1);
    int base = add_job(w, "incast", gpus, start);
    WorkStep sink;
    for (int s = 1; s <= senders; ++s) {
      WorkStep step;
      step.sends.push_back({base, bytes});
      w.agents[base + s].steps.push_back(step);
      sink.recvs.push_back({base + s, bytes});
    }
    w.agents[base].steps.push_back(sink);
  } else {
    throw ConfigError(where + ": unknown pattern '" + pattern + "' (permutation, incast)");
  }
}

void add_flow(Workload& w, int src, int dst, std::int64_t bytes, Time start, int gpus, const std::string& where) {
  if (src < 0 || dst < 0 || src >= gpus || dst >= gpus)
    throw ConfigError(where + ": flow GPUs must be in 0-" + std::to_string(gpus - 1));
  if (src == dst) throw ConfigError(where + ": a flow needs two different GPUs");
  int base = add_job(w, "flow", {src, dst}, start);
  WorkStep s, r;
  s.sends.push_back({base + 1, bytes});
  r.recvs.push_back({base, bytes});
  w.agents[base].steps.push_back(s);
  w.agents[base + 1].steps.push_back(r);
}

// COLLECTIVE:ALGORITHM:SIZE[@GPUS], permutation:SIZE, incast:N:SIZE, alltoall:SIZE,
// flow:SRC:DST:SIZE.
void add_spec(Workload& w, const std::string& spec, const Topology& t, std::uint64_t seed) {
  std::string body = spec, range;
  const auto at = spec.find('@');
  if (at != std::string::npos) {
    body = spec.substr(0, at);
    range = spec.substr(at + 1);
    if (range.empty()) throw ConfigError("--workload " + spec + ": no GPUs after '@' (e.g. @0-15)");
  }
  const int G = t.gpu_count();
  std::vector<int> gpus = at == std::string::npos ? all_gpus(t) : parse_gpu_list(range, G, "--workload " + spec);
  auto parts = split_fields(body, ':');
  const std::string where = "--workload " + spec;
  if (parts[0] == "permutation" && parts.size() == 2) {
    add_pattern(w, "permutation", parse_bytes(parts[1], where), gpus, 0, seed, 0, where);
  } else if (parts[0] == "incast" && parts.size() == 3) {
    const auto senders = parse_integer(parts[1]);
    if (!senders || *senders > (1 << 24)) throw ConfigError(where + ": '" + parts[1] + "' is not a number of senders");
    add_pattern(w, "incast", parse_bytes(parts[2], where), gpus, 0, seed, static_cast<int>(*senders), where);
  } else if (parts[0] == "flow" && parts.size() == 4) {
    const auto src = parse_integer(parts[1]), dst = parse_integer(parts[2]);
    if (!src || !dst || *src > (1 << 24) || *dst > (1 << 24)) throw ConfigError(where + ": expected flow:SRC:DST:SIZE with GPU numbers");
    add_flow(w, static_cast<int>(*src), static_cast<int>(*dst), parse_bytes(parts[3], where), 0, G, where);
  } else if (parts.size() == 3 || (parts.size() == 2 && parts[0] == "alltoall")) {
    std::string algorithm = parts.size() == 3 ? parts[1] : "pairwise";
    add_collective(w, parts[0], algorithm, parse_bytes(parts.back(), where), gpus, t, 0);
  } else {
    throw ConfigError(where + ": expected a trace folder, a job file (.yaml), COLLECTIVE:ALGORITHM:SIZE[@GPUS], "
                              "permutation:SIZE, incast:N:SIZE, alltoall:SIZE or flow:SRC:DST:SIZE");
  }
}

}  // namespace weft::sim
