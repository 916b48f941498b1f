// Workloads from a trace folder written by a real run (WEFT_TRACE; docs/trace-format.md).
#include <nlohmann/json.hpp>

#include <climits>
#include <fstream>
#include <functional>
#include <map>

#include <algorithm>
#include <numeric>
#include <random>
#include <string_view>

#include "weft/algo/collective_facts.h"
#include "weft/algo/registry.h"
#include "weft/algo/trace_files.h"
#include "weft/sim/config.h"
#include "weft/sim/workload_build.h"
#include "weft/util/error.h"
#include "weft/util/json_integer.h"

namespace weft::sim {

// The messages a record lists must be those of the program rebuilt from its algorithm:
// otherwise the trace came from another version or was edited, and replaying it would
// simulate traffic the run never sent.
namespace {

// An integer field of a trace record (a float or an out-of-range number is refused).
std::int64_t whole(const nlohmann::json& v, const char* what, std::int64_t lo = INT64_MIN, std::int64_t hi = INT64_MAX) {
  const std::optional<std::int64_t> n = json_integer(v, lo, hi);
  if (!n) {
    const std::string range = lo == 0 && hi < INT64_MAX ? " from 0 to " + std::to_string(hi) : lo == 0 ? " >= 0" : "";
    throw ConfigError(std::string(what) + " must be a whole number" + range + ", got " + v.dump());
  }
  return *n;
}
int rank_field(const nlohmann::json& v, const char* what) { return static_cast<int>(whole(v, what, INT_MIN, INT_MAX)); }

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
    for (const auto& m : step) sends.push_back({rank_field(m.at("to"), "a step's 'to'"), whole(m.at("bytes"), "a step's 'bytes'")});
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

// A rank's streams are numbered 0 to kMaxStream.
constexpr std::int64_t kMaxStream = 15;

// The longest idle time between two operations of a rank that a trace may hold (its
// picoseconds must fit the simulator's clock many times over).
constexpr std::int64_t kMaxGapUs = std::int64_t{1000000} * 86400 * 11;

// The compute gap from the stream's previous point (`last`) to a record's start, checked
// against kMaxGapUs; none when the replay leaves gaps out.
Time compute_gap(std::int64_t start, std::int64_t last, bool gaps, const std::string& where) {
  if (start <= last) return 0;
  if (start - last > kMaxGapUs)
    throw ConfigError(where + ": a gap of " + std::to_string(start - last) + " us after the previous operation (more than 11 days)");
  return gaps ? static_cast<Time>(start - last) * kUs : 0;
}

// A point of a stream's timeline between two operations: the time it reached (the previous
// operations' end) and the steps its agent had by then.
struct Boundary {
  std::int64_t us;
  std::size_t steps;
};
// A record that waits ("after") until another stream of its rank reaches at_us.
struct StreamWait {
  int waiting_agent, stream;
  std::int64_t at_us;
  std::string where;
};

// A record's "after" field, checked: the waiting agent, the other stream S (not the record's
// own) and the point T of S's timeline, at most `latest` (the record's start_us; a waiting
// mark's end_us).
StreamWait stream_wait(const nlohmann::json& after, int agent, int stream, std::int64_t latest, const char* latest_name,
                       const std::string& where) {
  if (!after.is_object() || !after.contains("stream") || !after.contains("us"))
    throw ConfigError(where + ": 'after' must be {\"stream\": S, \"us\": T}");
  const auto other = static_cast<int>(whole(after["stream"], "after's stream", 0, kMaxStream));
  const std::int64_t at = whole(after["us"], "after's us", 0);
  if (other == stream) throw ConfigError(where + ": after's stream " + std::to_string(other) + " is the record's own stream");
  if (at > latest)
    throw ConfigError(where + ": after's us " + std::to_string(at) + " is later than the record's " + latest_name + " " +
                      std::to_string(latest));
  return {agent, other, at, where};
}

// Each wait becomes an order between the two agents (a send of no bytes, workload_build.h):
// the stream waited for releases the waiting record where its own timeline reaches at_us,
// from a step of its own put between its operations, which takes that part of the compute
// gap before the next operation (at_us inside an operation: as the operation ends, as a
// CUDA event recorded then would). Inserted from the last position back, so that the
// earlier positions stay put.
void release_stream_waits(Workload& w, const std::vector<StreamWait>& waits, const std::map<int, std::vector<Boundary>>& boundaries,
                          bool gaps, const std::function<int(int)>& agent_of_stream) {
  // (stream, position) -> (the gap into it, the waiting agent)
  std::map<std::pair<int, std::size_t>, std::vector<std::pair<Time, int>>> at;
  for (const StreamWait& x : waits) {
    const auto found = boundaries.find(x.stream);
    if (found == boundaries.end())
      throw ConfigError(x.where + ": after's stream " + std::to_string(x.stream) + ": the rank has no records on that stream");
    const std::vector<Boundary>& b = found->second;
    const std::vector<WorkStep>& steps = w.agents[static_cast<std::size_t>(agent_of_stream(x.stream))].steps;
    // The last point at or before at_us (or the stream's start).
    auto it = std::upper_bound(b.begin(), b.end(), x.at_us, [](std::int64_t us, const Boundary& p) { return us < p.us; });
    std::size_t i = it == b.begin() ? 0 : static_cast<std::size_t>(it - b.begin()) - 1;
    if (x.at_us - b[i].us > kMaxGapUs)
      throw ConfigError(x.where + ": after's us " + std::to_string(x.at_us) + " is more than 11 days past stream " +
                        std::to_string(x.stream) + "'s operations before it");
    Time gap = gaps ? static_cast<Time>(std::max<std::int64_t>(0, x.at_us - b[i].us)) * kUs : 0;
    if (b[i].steps < steps.size() && gap > steps[b[i].steps].gap && i + 1 < b.size()) ++i, gap = 0;
    at[{x.stream, b[i].steps}].push_back({gap, x.waiting_agent});
  }
  for (auto pos = at.rbegin(); pos != at.rend(); ++pos) {
    std::vector<std::pair<Time, int>>& list = pos->second;
    std::stable_sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<WorkStep>& steps = w.agents[static_cast<std::size_t>(agent_of_stream(pos->first.first))].steps;
    const std::size_t where = pos->first.second;
    std::vector<WorkStep> releases;
    Time used = 0;
    for (const auto& [gap, agent] : list) {
      WorkStep go;
      go.gap = gap - used;
      used = gap;
      go.sends.push_back({agent, 0});
      releases.push_back(go);
    }
    if (where < steps.size()) steps[where].gap -= used;
    steps.insert(steps.begin() + static_cast<std::ptrdiff_t>(where), releases.begin(), releases.end());
  }
}

}  // namespace

std::vector<int> trace_gpus(const std::map<int, std::string>& files, const std::string& dir, const Topology& t,
                            const std::vector<int>& placement) {
  const int world = files.rbegin()->first + 1;
  if (static_cast<int>(files.size()) != world)
    throw ConfigError("trace folder " + dir + ": ranks 0-" + std::to_string(world - 1) + " expected, " +
                      std::to_string(files.size()) + " files found");
  std::vector<int> gpus = placement;
  if (gpus.empty()) {
    if (world > t.gpu_count())
      throw ConfigError("trace of " + std::to_string(world) + " ranks does not fit the topology's " +
                        std::to_string(t.gpu_count()) + " GPUs");
    gpus.resize(world);
    std::iota(gpus.begin(), gpus.end(), 0);
  } else if (static_cast<int>(gpus.size()) != world) {
    throw ConfigError("trace of " + std::to_string(world) + " ranks placed on " + std::to_string(gpus.size()) + " GPUs");
  }
  return gpus;
}

void add_trace(Workload& w, const std::string& dir, const Topology& t, bool gaps, const std::vector<int>& placement) {
  std::optional<algo::TraceFolder> folder = algo::list_trace_folder(dir);
  if (!folder) throw ConfigError("trace folder " + dir + " cannot be opened");
  if (!folder->unexpected.empty())
    throw ConfigError("trace folder " + dir + ": unexpected file name " + folder->unexpected.front());
  const std::map<int, std::string> files = std::move(folder->files);
  if (files.empty() && add_chakra(w, dir, t, gaps, placement)) return;
  if (files.empty()) throw ConfigError("trace folder " + dir + " has no rank-<n>.jsonl files (or Chakra <name>.<rank>.et files)");
  const std::vector<int> gpus = trace_gpus(files, dir, t, placement);
  const int world = static_cast<int>(gpus.size());
  const int base = add_job(w, "trace " + dir, gpus, 0);
  const int job = w.agents[static_cast<std::size_t>(base)].job;
  // A record's stream (default 0) is a sequence of operations that runs beside the rank's
  // other streams (the planner puts data-parallel reductions on stream 1): each stream of a
  // rank is an agent of its own on the rank's GPU, made for every rank when a record first
  // names the stream.
  // A collective whose program has several channels runs each of its channels but the
  // first on agents of their own too (per stream and channel), released by the stream's
  // agent when it reaches the record and joined again before its next one.
  std::map<std::pair<int, int>, int> stream_base{{{0, 0}, base}};  // (stream, channel) -> first agent
  auto channel_agent = [&](int stream, int channel, int rank) {
    auto found = stream_base.find({stream, channel});
    if (found == stream_base.end()) {
      found = stream_base.emplace(std::pair{stream, channel}, static_cast<int>(w.agents.size())).first;
      for (int q = 0; q < world; ++q) {
        Agent a;
        a.job = job, a.rank = q, a.gpu = gpus[static_cast<std::size_t>(q)], a.stream = stream, a.channel = channel;
        w.agents.push_back(std::move(a));
      }
    }
    return found->second + rank;
  };
  auto agent_index = [&](int stream, int rank) { return channel_agent(stream, 0, rank); };
  // Files are read one line at a time and turned into steps at once (a 1024-rank iteration
  // is hundreds of MB of JSON). Each stream's timeline starts at its first record (a mark
  // where the iteration began, or its first operation); the offsets from the earliest one
  // become the agents' start times.
  std::map<std::pair<std::string, int>, int> instance;
  std::map<int, std::int64_t> first_start;  // per agent
  for (const auto& [r, path] : files) {
    std::map<std::string, int> occurrence;
    std::map<int, std::int64_t> prev_end;  // per stream
    // Per stream: its timeline's points between operations, and the records that wait for
    // another stream ("after").
    std::map<int, std::vector<Boundary>> boundaries;
    std::vector<StreamWait> waits;
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
      // A mark is a point in time; an operation also says what it moved.
      const bool mark = rec.j.is_object() && rec.j.contains("op") && rec.j["op"] == "mark";
      for (const char* key : {"op", "start_us", "end_us", "count", "bytes"}) {
        if (mark && key == std::string_view("count")) break;
        if (!rec.j.is_object() || !rec.j.contains(key))
          throw ConfigError(rec.where + ": missing field '" + std::string(key) + "'");
      }
      const nlohmann::json& j = rec.j;
      try {
        const int stream = j.contains("stream") ? static_cast<int>(whole(j["stream"], "stream", 0, kMaxStream)) : 0;
        const int agent_at = agent_index(stream, r);
        auto agent_of_global = [&](int rank) { return agent_index(stream, rank); };
        std::int64_t& last = prev_end.try_emplace(stream, INT64_MIN).first->second;
        std::string op = j["op"].get<std::string>();
        std::int64_t start = whole(j["start_us"], "start_us"), end = whole(j["end_us"], "end_us");
        if (start < 0 || end < start)
          throw ConfigError(rec.where + ": start_us " + std::to_string(start) + " and end_us " + std::to_string(end) +
                            " are not 0 <= start <= end");
        if (mark) {
          // A rank's timeline starts at its first record: a mark before the first operation
          // (where the iteration began) keeps the compute up to that operation. Later marks
          // carry no time of their own, but for one that waits.
          if (last == INT64_MIN) {
            first_start[agent_at] = last = start;
            boundaries[stream].push_back({start, w.agents[static_cast<std::size_t>(agent_at)].steps.size()});
          }
          if (j.contains("after")) {
            // A mark that waits ("after"): the stream stops at start_us, once the compute
            // before it is done, until stream S reaches T (a compute stream waiting on a CUDA
            // event before a layer's kernels), and goes on from end_us, where it resumed.
            const StreamWait wait = stream_wait(j["after"], agent_at, stream, end, "end_us", rec.where);
            WorkStep step;
            step.gap = compute_gap(start, last, gaps, rec.where);
            step.recvs.push_back({agent_index(wait.stream, r), 0});  // (may add agents: no reference held across it)
            std::vector<WorkStep>& steps = w.agents[static_cast<std::size_t>(agent_at)].steps;
            boundaries[stream].push_back({last, steps.size()});
            steps.push_back(step);
            waits.push_back(wait);
            last = std::max(last, end);
          }
          continue;
        }
        if (last == INT64_MIN) {
          first_start[agent_at] = start;
          last = start;
        }
        Time gap = compute_gap(start, last, gaps, rec.where);
        boundaries[stream].push_back({last, w.agents[static_cast<std::size_t>(agent_at)].steps.size()});
        last = std::max(last, end);
        // "after": the record starts once another stream of this rank has reached a point of
        // its own timeline (as a CUDA event recorded there and waited on), and its own
        // stream's previous operation is done: not after its recorded gap.
        if (j.contains("after")) {
          const StreamWait wait = stream_wait(j["after"], agent_at, stream, start, "start_us", rec.where);
          WorkStep step;
          step.recvs.push_back({agent_index(wait.stream, r), 0});  // (may add agents: no reference held across it)
          w.agents[static_cast<std::size_t>(agent_at)].steps.push_back(step);
          waits.push_back(wait);
          gap = 0;
        }
        Agent& agent = w.agents[static_cast<std::size_t>(agent_at)];
        std::int64_t count = whole(j["count"], "count"), bytes = whole(j["bytes"], "bytes");
        if (count < 0 || bytes < 0) throw ConfigError(rec.where + ": negative count or bytes");
        if (op == "send" || op == "recv") {
          int peer = rank_field(j.at("peers").is_array() ? j["peers"].at(0) : j["peers"], "peers");
          if (peer < 0 || peer >= world) throw ConfigError(rec.where + ": peer " + std::to_string(peer) + " is not a rank");
          WorkStep s;
          s.gap = gap;
          (op == "send" ? s.sends : s.recvs).push_back({agent_of_global(peer), bytes});
          agent.steps.push_back(s);
          continue;
        }
        algo::Collective c = algo::parse_collective(op);
        std::string algorithm = j.value("algorithm", "");
        std::vector<int> members;
        if (!j.at("group_ranks").is_array()) throw ConfigError("group_ranks must be a list of ranks");
        for (const auto& m : j["group_ranks"]) members.push_back(rank_field(m, "group_ranks"));
        int index = static_cast<int>(std::find(members.begin(), members.end(), r) - members.begin());
        if (index == static_cast<int>(members.size())) throw ConfigError(rec.where + ": rank " + std::to_string(r) + " is not in group_ranks");
        for (int m : members)
          if (m < 0 || m >= world) throw ConfigError(rec.where + ": group rank " + std::to_string(m) + " is not a rank");
        int gw = static_cast<int>(members.size());
        algo::Options opts;
        if (j.contains("root")) {
          int root = rank_field(j["root"], "root");
          opts.root = static_cast<int>(std::find(members.begin(), members.end(), root) - members.begin());
          if (opts.root == gw) throw ConfigError(rec.where + ": root " + std::to_string(root) + " is not in the group");
        }
        opts.local_world = t.gpus_per_host > 1 && gw % t.gpus_per_host == 0 ? t.gpus_per_host : 0;
        std::int64_t element = count > 0 ? bytes / count : 4;
        if (element <= 0) element = 4;
        algo::Program p = algo::build_program(c, algorithm, index, gw, algo::data_elements(c, count, gw), opts);
        std::vector<int> agent_of(gw);
        for (int i = 0; i < gw; ++i) agent_of[i] = agent_of_global(members[i]);
        if (j.contains("steps")) check_recorded_steps(j["steps"], p, members, element, algorithm, rec.where);
        // The k-th collective of a group on every member rank is one operation.
        std::string group_key = std::to_string(stream) + ":";
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
        const std::size_t channels = algo::channel_count(p);
        if (channels == 1) {
          append_program(w.agents[static_cast<std::size_t>(agent_at)], p, element, {agent_of}, ci, gap);
          continue;
        }
        std::vector<std::vector<int>> agents_of(channels, agent_of);
        for (std::size_t ch = 1; ch < channels; ++ch)
          for (int i = 0; i < gw; ++i) agents_of[ch][static_cast<std::size_t>(i)] = channel_agent(stream, static_cast<int>(ch), members[static_cast<std::size_t>(i)]);
        // Release this rank's other channels, run, join.
        std::vector<int> others;
        for (std::size_t ch = 1; ch < channels; ++ch) others.push_back(agents_of[ch][static_cast<std::size_t>(index)]);
        release(w, agent_at, others, gap);
        for (std::size_t ch = 0; ch < channels; ++ch)
          append_program(w.agents[static_cast<std::size_t>(agents_of[ch][static_cast<std::size_t>(index)])], p, element,
                         agents_of, ci, 0, std::nullopt, static_cast<int>(ch));
        gather(w, agent_at, others);
      } catch (const ConfigError& e) {
        std::string msg = e.what();
        throw ConfigError(msg.rfind(rec.where, 0) == 0 ? msg : rec.where + ": " + msg);
      } catch (const nlohmann::json::exception& e) {
        throw ConfigError(rec.where + ": bad field (" + std::string(e.what()) + ")");
      }
    }
    for (auto& [stream, b] : boundaries) b.push_back({prev_end[stream], w.agents[static_cast<std::size_t>(agent_index(stream, r))].steps.size()});
    release_stream_waits(w, waits, boundaries, gaps, [&, rank = r](int stream) { return agent_index(stream, rank); });
  }
  if (first_start.empty() || !gaps) return;
  std::int64_t t0 = INT64_MAX;
  for (const auto& [a, start] : first_start) t0 = std::min(t0, start);
  for (const auto& [a, start] : first_start) w.agents[static_cast<std::size_t>(a)].start = static_cast<Time>(start - t0) * kUs;
}

}  // namespace weft::sim
