// Workloads from a job file: several jobs (collectives, traces, patterns) on chosen GPUs and
// start times, and failures (docs/simulator.md).
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>

#include "weft/algo/collective_facts.h"
#include "weft/algo/registry.h"
#include "weft/sim/config.h"
#include "weft/sim/workload_build.h"
#include "weft/util/error.h"
#include "weft/util/parse.h"

namespace weft::sim {

namespace {
Time opt_time(const YAML::Node& n, const char* key, const std::string& where) {
  return n[key] ? parse_time(n[key].as<std::string>(), where + "." + key) : 0;
}

}  // namespace

void load_job_file(Workload& w, const std::string& path, const Topology& t, std::uint64_t seed) {
  YAML::Node y;
  try {
    y = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw ConfigError(path + ": not valid YAML (line " + std::to_string(e.mark.line + 1) + ": " + e.msg + ")");
  }
  if (!y.IsMap() || !y["jobs"] || !y["jobs"].IsSequence()) throw ConfigError(path + ": expected 'jobs:' with a list of jobs");
  std::set<std::string> top;
  for (const auto& kv : y) {
    if (kv.first.as<std::string>() != "jobs" && kv.first.as<std::string>() != "failures")
      throw ConfigError(path + ": unknown key '" + kv.first.as<std::string>() + "' (jobs, failures)");
    if (!top.insert(kv.first.as<std::string>()).second)
      throw ConfigError(path + ": key '" + kv.first.as<std::string>() + "' is given twice");
  }
  std::string folder = path.substr(0, path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  int i = 0;
  for (const auto& job : y["jobs"]) {
    std::string where = path + ": jobs[" + std::to_string(i++) + "]";
    try {
      if (!job.IsMap()) throw ConfigError(where + ": expected a mapping");
      std::set<std::string> seen;  // yaml-cpp keeps both entries of a repeated key and reads the first
      for (const auto& kv : job) {
        if (!seen.insert(kv.first.as<std::string>()).second)
          throw ConfigError(where + ": key '" + kv.first.as<std::string>() + "' is given twice");
        static const char* known[] = {"collective", "algorithm", "size", "gpus", "start", "iterations", "pattern",
                                      "senders", "trace", "gaps", "src", "dst", "flow", "queue"};
        std::string k = kv.first.as<std::string>();
        if (std::find(std::begin(known), std::end(known), k) == std::end(known))
          throw ConfigError(where + ": unknown key '" + k + "'");
      }
      std::vector<int> gpus = job["gpus"] ? parse_gpu_list(job["gpus"].as<std::string>(), t.gpu_count(), where)
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
                       size(), gpus, t, start, iterations);
      } else if (job["pattern"]) {
        add_pattern(w, job["pattern"].as<std::string>(), size(), gpus, start, seed + static_cast<std::uint64_t>(i),
                    job["senders"] ? job["senders"].as<int>() : static_cast<int>(gpus.size()) - 1, where);
      } else if (job["trace"]) {
        std::string dir = job["trace"].as<std::string>();
        if (!dir.empty() && dir[0] != '/') dir = folder + dir;
        bool gaps = !job["gaps"] || job["gaps"].as<std::string>() != "off";
        add_trace(w, dir, t, gaps, job["gpus"] ? gpus : std::vector<int>{});
      } else if (job["flow"] || job["src"]) {
        add_flow(w, job["src"].as<int>(), job["dst"].as<int>(), size(), start, t.gpu_count(), where);
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

}  // namespace weft::sim
