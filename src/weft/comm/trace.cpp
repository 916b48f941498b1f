#include "weft/comm/trace.h"

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "weft/util/error.h"
#include "weft/util/file.h"

namespace weft::comm {

std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Tracer::Tracer(const std::string& dir, int global_rank) : path_(dir + "/rank-" + std::to_string(global_rank) + ".jsonl") {
  make_directories(dir);
  std::ofstream f(path_, std::ios::trunc);
  if (!f) throw ConfigError("WEFT_TRACE: cannot write " + path_);
}

void Tracer::write(const TraceRecord& r) {
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& s : r.steps) {
    nlohmann::json sends = nlohmann::json::array();
    for (const auto& [peer, bytes] : s) sends.push_back({{"to", peer}, {"bytes", bytes}});
    steps.push_back(sends);
  }
  nlohmann::json j = {{"op", r.op},          {"group", r.group},   {"group_ranks", r.group_ranks},
                      {"rank", r.rank},      {"dtype", r.dtype},   {"count", r.count},
                      {"bytes", r.bytes},    {"start_us", r.start_us}, {"end_us", r.end_us},
                      {"steps", steps}};
  if (!r.algorithm.empty()) j["algorithm"] = r.algorithm;
  if (!r.reduce.empty()) j["reduce"] = r.reduce;
  if (r.root >= 0) j["root"] = r.root;
  if (!r.peers.empty()) j["peers"] = r.peers;
  std::lock_guard<std::mutex> lock(mu_);
  std::ofstream f(path_, std::ios::app);
  f << j.dump() << "\n";
}

}  // namespace weft::comm
