#include "weft/sim/workload.h"

#include <dirent.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <numeric>
#include <random>

#include "weft/algo/registry.h"
#include "weft/sim/config.h"
#include "weft/algo/collective_facts.h"
#include "weft/util/error.h"
#include "weft/util/file.h"

namespace weft::sim {
namespace {

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

std::vector<int> parse_gpu_list(const std::string& text, int gpus, const std::string& where) {
  std::vector<int> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t comma = text.find(',', pos);
    std::string part = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    auto dash = part.find('-');
    try {
      std::size_t used = 0;
      int a = std::stoi(part, &used);
      int b = a;
      if (dash != std::string::npos) {
        if (used != dash) throw 0;
        std::string rest = part.substr(dash + 1);
        b = std::stoi(rest, &used);
        if (used != rest.size()) throw 0;
      } else if (used != part.size()) {
        throw 0;
      }
      if (a < 0 || b < a || b >= gpus) throw 1;
      for (int g = a; g <= b; ++g) out.push_back(g);
    } catch (int code) {
      if (code == 1)
        throw ConfigError(where + ": GPUs '" + part + "' out of range (the topology has GPUs 0-" + std::to_string(gpus - 1) + ")");
      throw ConfigError(where + ": '" + part + "' is not a GPU range (e.g. 0-15 or 0,2,4)");
    } catch (...) {
      throw ConfigError(where + ": '" + part + "' is not a GPU range (e.g. 0-15 or 0,2,4)");
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  std::vector<int> sorted = out;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    throw ConfigError(where + ": a GPU appears twice in '" + text + "'");
  return out;
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

// --- traces (docs/trace-format.md) ---

// The messages a record lists must be those of the program rebuilt from its algorithm:
// otherwise the trace came from another version or was edited, and replaying it would
// simulate traffic the run never sent.
void check_recorded_steps(const nlohmann::json& steps, const algo::Program& p, const std::vector<int>& members,
                          std::int64_t element, const std::string& algorithm, const std::string& where) {
  using Sends = std::vector<std::pair<int, std::int64_t>>;
  std::vector<Sends> want, got;
  for (const algo::Step& s : p.steps) {
    Sends sends;
    for (const algo::Op& op : s.ops)
      if (op.kind == algo::OpKind::kSend) sends.push_back({members[op.peer], op.src.count * element});
    if (!sends.empty()) want.push_back(sends);
  }
  if (!steps.is_array()) throw ConfigError(where + ": 'steps' must be a list");
  for (const auto& step : steps) {
    Sends sends;
    for (const auto& m : step) sends.push_back({m.at("to").get<int>(), m.at("bytes").get<std::int64_t>()});
    if (!sends.empty()) got.push_back(sends);
  }
  auto sorted = [](std::vector<Sends> v) {
    for (auto& s : v) std::sort(s.begin(), s.end());
    return v;
  };
  if (sorted(want) != sorted(got))
    throw ConfigError(where + ": the recorded messages do not match algorithm '" + algorithm + "' (" +
                      std::to_string(got.size()) + " sending steps recorded, " + std::to_string(want.size()) +
                      " in the program)");
}

void add_trace(Workload& w, const std::string& dir, const Topology& t, bool gaps, const std::vector<int>& placement) {
  std::map<int, std::string> files;
  DIR* d = opendir(dir.c_str());
  if (!d) throw ConfigError("trace folder " + dir + " cannot be opened");
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind("rank-", 0) == 0 && name.size() > 11 && name.substr(name.size() - 6) == ".jsonl") {
      try {
        files[std::stoi(name.substr(5, name.size() - 11))] = dir + "/" + name;
      } catch (...) {
        throw ConfigError("trace folder " + dir + ": unexpected file name " + name);
      }
    }
  }
  closedir(d);
  if (files.empty()) throw ConfigError("trace folder " + dir + " has no rank-<n>.jsonl files");
  int world = files.rbegin()->first + 1;
  if (static_cast<int>(files.size()) != world)
    throw ConfigError("trace folder " + dir + ": ranks 0-" + std::to_string(world - 1) + " expected, " +
                      std::to_string(files.size()) + " files found");
  std::vector<int> gpus = placement;
  if (gpus.empty()) {
    if (world > static_cast<int>(t.gpus.size()))
      throw ConfigError("trace of " + std::to_string(world) + " ranks does not fit the topology's " +
                        std::to_string(t.gpus.size()) + " GPUs");
    gpus.resize(world);
    std::iota(gpus.begin(), gpus.end(), 0);
  } else if (static_cast<int>(gpus.size()) != world) {
    throw ConfigError("trace of " + std::to_string(world) + " ranks placed on " + std::to_string(gpus.size()) + " GPUs");
  }
  int base = add_job(w, "trace " + dir, gpus, 0);
  std::vector<int> agent_of_global(world);
  for (int r = 0; r < world; ++r) agent_of_global[r] = base + r;
  // Files are read one line at a time and turned into steps at once (a 1024-rank iteration
  // is hundreds of MB of JSON). Each rank's timeline starts at its first record; the ranks'
  // offsets from the earliest one become their start times.
  std::map<std::pair<std::string, int>, int> instance;
  std::vector<std::int64_t> first_start(world, INT64_MAX);
  for (const auto& [r, path] : files) {
    Agent& agent = w.agents[base + r];
    std::map<std::string, int> occurrence;
    std::int64_t prev_end = INT64_MIN;
    std::ifstream in(path);
    std::string line;
    int lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      if (line.empty()) continue;
      struct {
        nlohmann::json j;
        std::string where;
      } rec;
      rec.where = path + ":" + std::to_string(lineno);
      try {
        rec.j = nlohmann::json::parse(line);
      } catch (const std::exception&) {
        throw ConfigError(rec.where + ": not a JSON object");
      }
      for (const char* key : {"op", "start_us", "end_us", "count", "bytes"})
        if (!rec.j.is_object() || !rec.j.contains(key))
          throw ConfigError(rec.where + ": missing field '" + std::string(key) + "'");
      const nlohmann::json& j = rec.j;
      try {
        std::string op = j["op"].get<std::string>();
        std::int64_t start = j["start_us"].get<std::int64_t>(), end = j["end_us"].get<std::int64_t>();
        if (prev_end == INT64_MIN) {
          first_start[r] = start;
          prev_end = start;
        }
        Time gap = gaps && start > prev_end ? static_cast<Time>(start - prev_end) * kUs : 0;
        prev_end = std::max(prev_end, end);
        std::int64_t count = j["count"].get<std::int64_t>(), bytes = j["bytes"].get<std::int64_t>();
        if (count < 0 || bytes < 0) throw ConfigError(rec.where + ": negative count or bytes");
        if (op == "send" || op == "recv") {
          int peer = j.at("peers").is_array() ? j["peers"].at(0).get<int>() : j["peers"].get<int>();
          if (peer < 0 || peer >= world) throw ConfigError(rec.where + ": peer " + std::to_string(peer) + " is not a rank");
          WorkStep s;
          s.gap = gap;
          (op == "send" ? s.sends : s.recvs).push_back({agent_of_global[peer], bytes});
          agent.steps.push_back(s);
          continue;
        }
        algo::Collective c = algo::parse_collective(op);
        std::string algorithm = j.value("algorithm", "");
        std::vector<int> members = j.at("group_ranks").get<std::vector<int>>();
        int index = static_cast<int>(std::find(members.begin(), members.end(), r) - members.begin());
        if (index == static_cast<int>(members.size())) throw ConfigError(rec.where + ": rank " + std::to_string(r) + " is not in group_ranks");
        for (int m : members)
          if (m < 0 || m >= world) throw ConfigError(rec.where + ": group rank " + std::to_string(m) + " is not a rank");
        int gw = static_cast<int>(members.size());
        algo::Options opts;
        if (j.contains("root")) {
          int root = j["root"].get<int>();
          opts.root = static_cast<int>(std::find(members.begin(), members.end(), root) - members.begin());
          if (opts.root == gw) throw ConfigError(rec.where + ": root " + std::to_string(root) + " is not in the group");
        }
        opts.local_world = t.gpus_per_host > 1 && gw % t.gpus_per_host == 0 ? t.gpus_per_host : 0;
        std::int64_t element = count > 0 ? bytes / count : 4;
        if (element <= 0) element = 4;
        algo::Program p = algo::build_program(c, algorithm, index, gw, algo::data_elements(c, count, gw), opts);
        std::vector<int> agent_of(gw);
        for (int i = 0; i < gw; ++i) agent_of[i] = agent_of_global[members[i]];
        if (j.contains("steps")) check_recorded_steps(j["steps"], p, members, element, algorithm, rec.where);
        // The k-th collective of a group on every member rank is one operation.
        std::string group_key;
        for (int m : members) group_key += std::to_string(m) + ",";
        auto key = std::make_pair(group_key, occurrence[group_key]++);
        auto found = instance.find(key);
        int ci;
        if (found == instance.end()) {
          ci = static_cast<int>(w.collectives.size());
          instance[key] = ci;
          w.collectives.push_back(
              {op + "/" + algorithm, agent.job, gw, algo::data_elements(c, count, gw) * element, algo::busbw_factor(c, gw)});
        } else {
          ci = found->second;
        }
        append_program(agent, p, element, agent_of, ci, gap);
      } catch (const ConfigError& e) {
        std::string msg = e.what();
        throw ConfigError(msg.rfind(rec.where, 0) == 0 ? msg : rec.where + ": " + msg);
      } catch (const nlohmann::json::exception& e) {
        throw ConfigError(rec.where + ": bad field (" + std::string(e.what()) + ")");
      }
    }
  }
  std::int64_t t0 = *std::min_element(first_start.begin(), first_start.end());
  for (int r = 0; r < world; ++r)
    if (first_start[r] != INT64_MAX && gaps) w.agents[base + r].start = static_cast<Time>(first_start[r] - t0) * kUs;
}

Time opt_time(const YAML::Node& n, const char* key, const std::string& where) {
  return n[key] ? parse_time(n[key].as<std::string>(), where + "." + key) : 0;
}

void load_job_file(Workload& w, const std::string& path, const Topology& t, std::uint64_t seed) {
  YAML::Node y;
  try {
    y = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw ConfigError(path + ": not valid YAML (line " + std::to_string(e.mark.line + 1) + ": " + e.msg + ")");
  }
  if (!y.IsMap() || !y["jobs"] || !y["jobs"].IsSequence()) throw ConfigError(path + ": expected 'jobs:' with a list of jobs");
  for (const auto& kv : y)
    if (kv.first.as<std::string>() != "jobs" && kv.first.as<std::string>() != "failures")
      throw ConfigError(path + ": unknown key '" + kv.first.as<std::string>() + "' (jobs, failures)");
  std::string folder = path.substr(0, path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  int i = 0;
  for (const auto& job : y["jobs"]) {
    std::string where = path + ": jobs[" + std::to_string(i++) + "]";
    try {
      if (!job.IsMap()) throw ConfigError(where + ": expected a mapping");
      for (const auto& kv : job) {
        static const char* known[] = {"collective", "algorithm", "size", "gpus", "start", "iterations", "pattern",
                                      "senders", "trace", "gaps", "src", "dst", "flow", "queue"};
        std::string k = kv.first.as<std::string>();
        if (std::find(std::begin(known), std::end(known), k) == std::end(known))
          throw ConfigError(where + ": unknown key '" + k + "'");
      }
      std::vector<int> gpus = job["gpus"] ? parse_gpu_list(job["gpus"].as<std::string>(), static_cast<int>(t.gpus.size()), where)
                                          : all_gpus(t);
      const std::size_t first_agent = w.agents.size();
      Time start = opt_time(job, "start", where);
      auto size = [&] {
        if (!job["size"]) throw ConfigError(where + ": 'size' is required");
        return parse_bytes(job["size"].as<std::string>(), where + ".size");
      };
      if (job["collective"]) {
        int iterations = job["iterations"] ? job["iterations"].as<int>() : 1;
        if (iterations < 1) throw ConfigError(where + ".iterations must be >= 1");
        add_collective(w, job["collective"].as<std::string>(), job["algorithm"] ? job["algorithm"].as<std::string>() : "ring",
                       size(), gpus, t.gpus_per_host, start, iterations);
      } else if (job["pattern"]) {
        add_pattern(w, job["pattern"].as<std::string>(), size(), gpus, start, seed + static_cast<std::uint64_t>(i),
                    job["senders"] ? job["senders"].as<int>() : static_cast<int>(gpus.size()) - 1, where);
      } else if (job["trace"]) {
        std::string dir = job["trace"].as<std::string>();
        if (!dir.empty() && dir[0] != '/') dir = folder + dir;
        bool gaps = !job["gaps"] || job["gaps"].as<std::string>() != "off";
        add_trace(w, dir, t, gaps, job["gpus"] ? gpus : std::vector<int>{});
      } else if (job["flow"] || job["src"]) {
        add_flow(w, job["src"].as<int>(), job["dst"].as<int>(), size(), start, static_cast<int>(t.gpus.size()), where);
      } else {
        throw ConfigError(where + ": a job needs collective, pattern, trace or src/dst");
      }
      if (job["queue"]) {
        int queue = job["queue"].as<int>();
        if (queue < 0 || queue > 7) throw ConfigError(where + ".queue: " + std::to_string(queue) + " is not a queue (0-7)");
        for (std::size_t a = first_agent; a < w.agents.size(); ++a) w.agents[a].queue = queue;
      }
    } catch (const YAML::Exception& e) {
      throw ConfigError(where + ": " + e.msg);
    }
  }
  if (y["failures"]) {
    int k = 0;
    for (const auto& f : y["failures"]) {
      std::string where = path + ": failures[" + std::to_string(k++) + "]";
      try {
        Failure fail;
        fail.at = opt_time(f, "at", where);
        auto link = [&](const char* key) {
          if (!f[key].IsSequence() || f[key].size() != 2) throw ConfigError(where + "." + key + ": expected [node, node]");
          fail.a = f[key][0].as<std::string>();
          fail.b = f[key][1].as<std::string>();
        };
        if (f["link_down"]) {
          fail.kind = Failure::Kind::kLinkDown;
          link("link_down");
        } else if (f["link_up"]) {
          fail.kind = Failure::Kind::kLinkUp;
          link("link_up");
        } else if (f["degrade"]) {
          fail.kind = Failure::Kind::kLinkDegrade;
          link("degrade");
          if (!f["speed"]) throw ConfigError(where + ": degrade needs speed");
          fail.bps = parse_rate(f["speed"].as<std::string>(), where + ".speed");
        } else if (f["pause_storm"]) {
          fail.kind = Failure::Kind::kPauseStorm;
          link("pause_storm");
        } else if (f["switch_down"]) {
          fail.kind = Failure::Kind::kSwitchDown;
          fail.a = f["switch_down"].as<std::string>();
        } else if (f["switch_up"]) {
          fail.kind = Failure::Kind::kSwitchUp;
          fail.a = f["switch_up"].as<std::string>();
        } else {
          throw ConfigError(where + ": expected link_down, link_up, degrade, switch_down, switch_up or pause_storm");
        }
        for (const std::string& node : {fail.a, fail.b})
          if (!node.empty() && t.find(node) < 0) throw ConfigError(where + ": unknown node '" + node + "'");
        if (!fail.b.empty()) {
          int a = t.find(fail.a), b = t.find(fail.b);
          bool linked = false;
          for (const Link& l : t.links) linked = linked || (l.a == a && l.b == b) || (l.a == b && l.b == a);
          if (!linked) throw ConfigError(where + ": there is no link between " + fail.a + " and " + fail.b);
        }
        w.failures.push_back(fail);
      } catch (const YAML::Exception& e) {
        throw ConfigError(where + ": " + e.msg);
      }
    }
  }
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  for (;;) {
    std::size_t next = s.find(sep, pos);
    out.push_back(s.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
    if (next == std::string::npos) return out;
    pos = next + 1;
  }
}

}  // namespace

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
  for (int it = 0; it < iterations; ++it) {
    int ci = static_cast<int>(w.collectives.size());
    w.collectives.push_back({collective + "/" + algorithm, w.agents[base].job, world, bytes, algo::busbw_factor(c, world)});
    for (int r = 0; r < world; ++r) {
      algo::Program p = algo::build_program(c, algorithm, r, world, n, opts);
      append_program(w.agents[base + r], p, 4, agent_of, ci, 0);
    }
  }
}

Workload load_workload(const std::string& spec, const Topology& t, std::uint64_t seed) {
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
  std::string body = spec, range;
  const auto at = spec.find('@');
  if (at != std::string::npos) {
    body = spec.substr(0, at);
    range = spec.substr(at + 1);
    if (range.empty()) throw ConfigError("--workload " + spec + ": no GPUs after '@' (e.g. @0-15)");
  }
  const int G = static_cast<int>(t.gpus.size());
  std::vector<int> gpus = at == std::string::npos ? all_gpus(t) : parse_gpu_list(range, G, "--workload " + spec);
  auto parts = split(body, ':');
  const std::string where = "--workload " + spec;
  if (parts[0] == "permutation" && parts.size() == 2) {
    add_pattern(w, "permutation", parse_bytes(parts[1], where), gpus, 0, seed, 0, where);
  } else if (parts[0] == "incast" && parts.size() == 3) {
    int senders = 0;
    try {
      senders = std::stoi(parts[1]);
    } catch (...) {
      throw ConfigError(where + ": '" + parts[1] + "' is not a number of senders");
    }
    add_pattern(w, "incast", parse_bytes(parts[2], where), gpus, 0, seed, senders, where);
  } else if (parts[0] == "flow" && parts.size() == 4) {
    try {
      add_flow(w, std::stoi(parts[1]), std::stoi(parts[2]), parse_bytes(parts[3], where), 0, G, where);
    } catch (const std::invalid_argument&) {
      throw ConfigError(where + ": expected flow:SRC:DST:SIZE");
    }
  } else if (parts.size() == 3 || (parts.size() == 2 && parts[0] == "alltoall")) {
    std::string algorithm = parts.size() == 3 ? parts[1] : "pairwise";
    add_collective(w, parts[0], algorithm, parse_bytes(parts.back(), where), gpus, t.gpus_per_host, 0);
  } else {
    throw ConfigError(where + ": expected a trace folder, a job file (.yaml), COLLECTIVE:ALGORITHM:SIZE[@GPUS], "
                              "permutation:SIZE, incast:N:SIZE, alltoall:SIZE or flow:SRC:DST:SIZE");
  }
  return w;
}

}  // namespace weft::sim
