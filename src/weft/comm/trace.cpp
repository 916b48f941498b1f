#include "weft/comm/trace.h"

#include "weft/algo/collective_facts.h"
#include "weft/algo/trace_files.h"

#include <chrono>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>

#include "weft/util/env.h"
#include "weft/util/error.h"
#include "weft/util/file.h"

namespace weft::comm {

std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void check_trace_folder(const std::string& dir, int world) {
  if (!job_first_start()) return;
  if (const std::optional<std::string> past = algo::trace_files_past(dir, world))
    throw ConfigError("WEFT_TRACE: " + dir + " already holds " + *past + " of another run, past this job's " +
                      std::to_string(world) + (world == 1 ? " rank" : " ranks") +
                      "; a replay would mix the two: remove them or choose another folder");
}

Tracer::Tracer(const std::string& dir, int global_rank) : path_(dir + "/" + algo::trace_file_name(global_rank)) {
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
  append(j.dump());
}

void Tracer::mark(const std::string& name, int global_rank) {
  const std::int64_t t = now_us();
  append(nlohmann::json{{"op", "mark"}, {"name", name}, {"rank", global_rank}, {"start_us", t}, {"end_us", t}}.dump());
}

void Tracer::append(const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  std::ofstream f(path_, std::ios::app);
  f << line << "\n";
}

TraceRecord collective_record(algo::Collective c, const std::string& algorithm, const TraceGroup& g, DataType type,
                              ReduceOp op, std::int64_t count, int root) {
  const algo::CollectiveFacts& f = algo::facts(c);
  TraceRecord rec;
  rec.op = f.name;
  rec.algorithm = algorithm;
  rec.group = g.name;
  rec.group_ranks = g.ranks;
  rec.rank = g.rank;
  rec.dtype = dtype_name(type);
  if (f.reduces) rec.reduce = op_name(op);
  rec.count = count;
  rec.bytes = count * static_cast<std::int64_t>(element_size(type));
  if (f.rooted) rec.root = g.ranks[static_cast<std::size_t>(root)];
  return rec;
}

TraceRecord point_to_point_record(bool send, const TraceGroup& g, DataType type, std::int64_t count, int peer) {
  TraceRecord rec;
  rec.op = send ? "send" : "recv";
  rec.group = g.name;
  rec.group_ranks = g.ranks;
  rec.rank = g.rank;
  rec.dtype = dtype_name(type);
  rec.count = count;
  rec.bytes = count * static_cast<std::int64_t>(element_size(type));
  rec.peers = {g.ranks[static_cast<std::size_t>(peer)]};
  if (send) rec.steps = {{{rec.peers[0], rec.bytes}}};
  return rec;
}

}  // namespace weft::comm
