// Workloads from a folder of Chakra execution traces (chakra.h; docs/simulator.md, "Chakra
// execution traces"): each rank's graph of nodes becomes steps of agents on its GPU.
//
// How a rank's graph runs:
//   - GPU compute nodes run one at a time on the rank's compute agent, CPU operations
//     (is_cpu_op, and the metadata, memory and storage nodes) one at a time on its CPU
//     agent: each takes its recorded duration_micros;
//   - the collectives of one process group run one after another on the group's agent of
//     the rank (one NCCL stream per communicator), the k-th collective of a group on every
//     member being one operation; sends and receives run on an agent per (peer, tag);
//   - a node starts once the nodes it depends on are done: each agent takes its nodes in
//     one order of the whole graph that respects every dependency (the lowest id first among
//     the nodes whose dependencies come earlier), and a dependency on another agent's node
//     is a message of no bytes between the two agents on the GPU (workload_build.h's
//     release/gather idea), sent when that node is done.
// A dependency cycle, a collective the ranks do not agree on, or a send without its
// receive is a ConfigError.
#include <dirent.h>
#include <filesystem>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <map>
#include <memory>
#include <queue>
#include <set>
#include <string_view>
#include <unordered_map>

#include "weft/algo/collective_facts.h"
#include "weft/algo/registry.h"
#include "weft/sim/chakra.h"
#include "weft/sim/config.h"
#include "weft/sim/workload_build.h"
#include "weft/util/error.h"
#include "weft/util/file.h"
#include "weft/util/parse.h"

namespace weft::sim {

namespace {

// The largest trace file read, the most nodes of a folder (they become steps held in memory)
// and the longest node (its picoseconds must fit the simulator's clock many times over).
constexpr std::size_t kMaxChakraFileBytes = std::size_t{1} << 30;
constexpr std::uint64_t kMaxNodeUs = std::uint64_t{1000000} * 86400 * 11;
constexpr std::size_t kMaxChakraNodes = 20000000;  // about 2 steps of about 100 bytes each
// A message's bytes: ll's wire bytes (twice the payload) must fit in 63 bits.
constexpr std::int64_t kMaxCommBytes = std::int64_t{1} << 61;

algo::Collective collective_of(std::int64_t comm_type, const std::string& where) {
  switch (static_cast<ChakraCollective>(comm_type)) {
    case ChakraCollective::kAllReduce: return algo::Collective::kAllReduce;
    case ChakraCollective::kReduce: return algo::Collective::kReduce;
    case ChakraCollective::kAllGather: return algo::Collective::kAllGather;
    case ChakraCollective::kGather: return algo::Collective::kGather;
    case ChakraCollective::kScatter: return algo::Collective::kScatter;
    case ChakraCollective::kBroadcast: return algo::Collective::kBroadcast;
    case ChakraCollective::kAllToAll: return algo::Collective::kAllToAll;
    case ChakraCollective::kReduceScatter:
    case ChakraCollective::kReduceScatterBlock: return algo::Collective::kReduceScatter;
    case ChakraCollective::kBarrier: return algo::Collective::kBarrier;
  }
  throw ConfigError(where + ": comm_type " + std::to_string(comm_type) + " is not a Chakra collective (0-9)");
}

// The files <prefix>.<rank>.et of a folder, by rank (empty when it has none).
std::map<int, std::string> chakra_files(const std::string& dir) {
  std::map<int, std::string> files;
  std::string prefix;
  std::unique_ptr<DIR, int (*)(DIR*)> folder(opendir(dir.c_str()), &closedir);
  if (!folder) throw ConfigError("trace folder " + dir + " cannot be opened");
  while (dirent* e = readdir(folder.get())) {
    const std::string name = e->d_name;
    if (name.size() < 5 || name.compare(name.size() - 3, 3, ".et") != 0) continue;
    const std::size_t dot = name.rfind('.', name.size() - 4);
    if (dot == std::string::npos) continue;
    const auto rank = parse_integer(std::string_view(name).substr(dot + 1, name.size() - 4 - dot));
    if (!rank || *rank < 0 || *rank > 1 << 20) throw ConfigError("trace folder " + dir + ": unexpected file name " + name);
    const std::string mine = name.substr(0, dot);
    if (!prefix.empty() && mine != prefix)
      throw ConfigError("trace folder " + dir + " holds the Chakra traces of two workloads, " + prefix + ".*.et and " +
                        mine + ".*.et");
    prefix = mine;
    files[static_cast<int>(*rank)] = dir + "/" + name;
  }
  return files;
}

// ASTRA-sim's communicator groups file: {"NAME": [ranks...], ...}.
std::map<std::string, std::vector<int>> read_groups(const std::string& path, int world) {
  std::map<std::string, std::vector<int>> groups;
  if (!file_exists(path)) return groups;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception&) {
    throw ConfigError(path + ": not JSON");
  }
  if (!j.is_object()) throw ConfigError(path + ": expected an object of group names and their rank lists");
  for (const auto& [name, ranks] : j.items()) {
    if (!ranks.is_array() || ranks.empty()) throw ConfigError(path + ": group '" + name + "' is not a list of ranks");
    std::set<int> seen;
    std::vector<int>& members = groups[name];
    for (const auto& r : ranks) {
      if (!r.is_number_integer() || r.get<std::int64_t>() < 0 || r.get<std::int64_t>() >= world)
        throw ConfigError(path + ": group '" + name + "': " + r.dump() + " is not a rank of the " + std::to_string(world) +
                          "-rank trace");
      if (!seen.insert(r.get<int>()).second) throw ConfigError(path + ": group '" + name + "' lists rank " + r.dump() + " twice");
      members.push_back(r.get<int>());
    }
  }
  return groups;
}

// One order of the graph that respects every dependency: Kahn's, lowest id first.
std::vector<std::size_t> graph_order(const ChakraTrace& t, const std::string& where) {
  std::unordered_map<std::uint64_t, std::size_t> index;
  for (std::size_t i = 0; i < t.nodes.size(); ++i) index[t.nodes[i].id] = i;
  std::vector<int> waiting(t.nodes.size(), 0);
  std::vector<std::vector<std::size_t>> dependents(t.nodes.size());
  for (std::size_t i = 0; i < t.nodes.size(); ++i) {
    std::set<std::uint64_t> deps(t.nodes[i].deps.begin(), t.nodes[i].deps.end());
    for (std::uint64_t d : deps) {
      dependents[index.at(d)].push_back(i);
      ++waiting[i];
    }
  }
  using ReadyNode = std::pair<std::uint64_t, std::size_t>;  // (id, index)
  std::priority_queue<ReadyNode, std::vector<ReadyNode>, std::greater<>> ready;
  for (std::size_t i = 0; i < t.nodes.size(); ++i)
    if (waiting[i] == 0) ready.push({t.nodes[i].id, i});
  std::vector<std::size_t> order;
  order.reserve(t.nodes.size());
  while (!ready.empty()) {
    const std::size_t i = ready.top().second;
    ready.pop();
    order.push_back(i);
    for (std::size_t d : dependents[i])
      if (--waiting[d] == 0) ready.push({t.nodes[d].id, d});
  }
  if (order.size() != t.nodes.size()) {
    for (std::size_t i = 0; i < t.nodes.size(); ++i)
      if (waiting[i] > 0)
        throw ConfigError(where + ": node " + std::to_string(t.nodes[i].id) +
                          " is on a dependency cycle or waits for one (" +
                          std::to_string(t.nodes.size() - order.size()) + " nodes can never start)");
  }
  return order;
}

// Where one rank's nodes run.
enum class Unit { kGpu, kCpu, kGroup, kSend, kRecv };

Unit unit_of(const ChakraNode& n, const std::string& where) {
  switch (static_cast<ChakraNodeType>(n.type)) {
    case ChakraNodeType::kCompute: return n.is_cpu_op ? Unit::kCpu : Unit::kGpu;
    case ChakraNodeType::kMetadata:
    case ChakraNodeType::kMemLoad:
    case ChakraNodeType::kMemStore:
    case ChakraNodeType::kStorage:
    case ChakraNodeType::kBatch:
    case ChakraNodeType::kCheckpoint: return Unit::kCpu;
    case ChakraNodeType::kCollective: return Unit::kGroup;
    case ChakraNodeType::kSend: return Unit::kSend;
    case ChakraNodeType::kRecv: return Unit::kRecv;
    case ChakraNodeType::kInvalid: break;
  }
  throw ConfigError(where + ": node " + std::to_string(n.id) + " has node type " + std::to_string(n.type) +
                    " (Chakra's are 1-10)");
}

// The agents of the whole trace, made as ranks first need them (every member's at once for
// a group, so that a group's agents are consecutive for ChannelAgents).
class ChakraAgents {
 public:
  ChakraAgents(Workload& w, int job, const std::vector<int>& gpus) : w_(w), job_(job), gpus_(gpus) {}

  int unit(int rank, int which) {  // 0: GPU compute, 1: CPU
    return find_or_make({"", which, rank, 0, 0}, rank);
  }
  // (p2p direction 0: this rank sends to peer, 1: receives from it)
  int p2p(int rank, int peer, std::int64_t tag, int direction) {
    return find_or_make({"p2p", direction, rank, peer, tag}, rank);
  }
  ChannelAgents& group(const std::string& name, const std::vector<int>& members) {
    auto found = groups_.find(name);
    if (found == groups_.end()) {
      const int base = static_cast<int>(w_.agents.size());
      for (int m : members) make(m);
      found = groups_.emplace(name, std::make_unique<ChannelAgents>(w_, base, static_cast<int>(members.size()))).first;
    }
    return *found->second;
  }

 private:
  struct Key {
    std::string kind;
    int which, rank, peer;
    std::int64_t tag;
    auto operator<=>(const Key&) const = default;
  };
  int find_or_make(const Key& k, int rank) {
    auto found = agents_.find(k);
    if (found != agents_.end()) return found->second;
    const int a = make(rank);
    agents_.emplace(k, a);
    return a;
  }
  int make(int rank) {
    Agent a;
    a.job = job_, a.rank = rank, a.gpu = gpus_[static_cast<std::size_t>(rank)];
    a.stream = streams_[rank]++;
    w_.agents.push_back(std::move(a));
    return static_cast<int>(w_.agents.size()) - 1;
  }
  Workload& w_;
  int job_;
  const std::vector<int>& gpus_;
  std::map<Key, int> agents_;
  std::map<int, int> streams_;  // per rank: agents made so far (each agent is a stream of its own)
  std::map<std::string, std::unique_ptr<ChannelAgents>> groups_;
};

// One collective of the trace: what every member must agree on.
struct CollectiveKey {
  std::string group;
  int occurrence;
  auto operator<=>(const CollectiveKey&) const = default;
};
struct CollectiveSeen {
  int index;  // into Workload::collectives
  std::int64_t type, bytes;
  int first_rank;
  CollectiveChoice choice;  // its algorithm, protocol and their costs
};

}  // namespace

bool add_chakra(Workload& w, const std::string& dir, const Topology& t, bool gaps, const std::vector<int>& placement) {
  const std::map<int, std::string> files = chakra_files(dir);
  if (files.empty()) return false;
  const std::vector<int> gpus = trace_gpus(files, dir, t, placement);
  const int world = static_cast<int>(gpus.size());
  const std::string groups_path = dir + "/comm_group.json";
  const std::map<std::string, std::vector<int>> groups = read_groups(groups_path, world);
  std::vector<int> everyone(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) everyone[static_cast<std::size_t>(r)] = r;

  const int job = static_cast<int>(w.jobs.size());
  w.jobs.push_back("chakra " + dir);
  ChakraAgents agents(w, job, gpus);
  std::map<CollectiveKey, CollectiveSeen> collectives;
  std::map<int, std::map<std::string, int>> issued;  // rank -> group -> collectives
  std::size_t nodes_read = 0;
  for (const auto& [rank, path] : files) {
    std::error_code error;
    const std::uintmax_t size = std::filesystem::file_size(path, error);
    if (error) throw ConfigError("cannot read " + path + ": " + error.message());
    if (size > kMaxChakraFileBytes)
      throw ConfigError(path + ": " + std::to_string(size) + " bytes, more than the 1 GiB a Chakra trace may have here");
    std::string bytes = read_file(path);
    const ChakraTrace trace = parse_chakra(bytes, path);
    bytes.clear();
    bytes.shrink_to_fit();
    nodes_read += trace.nodes.size();
    if (nodes_read > kMaxChakraNodes)
      throw ConfigError("trace folder " + dir + ": more than " + std::to_string(kMaxChakraNodes / 1000000) +
                        " million nodes (each becomes steps held in memory)");
    const std::vector<std::size_t> order = graph_order(trace, path);
    const std::size_t n = trace.nodes.size();

    // Each node's agent (for a collective: its channel-0 agent), and the other agents that
    // wait for it.
    std::vector<int> agent_of(n);
    std::vector<int> peer_of(n, -1);  // a send's or receive's other rank; a collective's rank in its group
    std::vector<const std::vector<int>*> members_of(n, nullptr);
    std::unordered_map<std::uint64_t, std::size_t> index;
    for (std::size_t i = 0; i < n; ++i) index[trace.nodes[i].id] = i;
    for (std::size_t i : order) {
      const ChakraNode& node = trace.nodes[i];
      const std::string where = path + ": node " + std::to_string(node.id);
      if (node.duration_us > kMaxNodeUs)
        throw ConfigError(where + ": duration_micros " + std::to_string(node.duration_us) + " (more than 11 days)");
      if (node.comm_size < 0 || node.comm_size > kMaxCommBytes)
        throw ConfigError(where + ": comm_size " + std::to_string(node.comm_size) + " is not 0 to 2^61 bytes");
      switch (unit_of(node, path)) {
        case Unit::kGpu: agent_of[i] = agents.unit(rank, 0); break;
        case Unit::kCpu: agent_of[i] = agents.unit(rank, 1); break;
        case Unit::kSend:
        case Unit::kRecv: {
          const bool send = node.type == static_cast<int>(ChakraNodeType::kSend);
          const std::int64_t peer = send ? node.comm_dst : node.comm_src;
          if (peer < 0 || peer >= world || peer == rank)
            throw ConfigError(where + ": " + (send ? "comm_dst " : "comm_src ") + std::to_string(peer) +
                              " is not another rank of the " + std::to_string(world) + "-rank trace");
          peer_of[i] = static_cast<int>(peer);
          agent_of[i] = agents.p2p(rank, peer_of[i], node.comm_tag, send ? 0 : 1);
          break;
        }
        case Unit::kGroup: {
          const std::vector<int>* members = &everyone;
          if (!node.pg_name.empty()) {
            auto g = groups.find(node.pg_name);
            if (g == groups.end())
              throw ConfigError(where + ": process group '" + node.pg_name + "' is not in " + groups_path);
            members = &g->second;
          }
          const auto me = std::find(members->begin(), members->end(), rank);
          if (me == members->end())
            throw ConfigError(where + ": rank " + std::to_string(rank) + " is not a member of process group '" +
                              node.pg_name + "'");
          members_of[i] = members;
          peer_of[i] = static_cast<int>(me - members->begin());
          agent_of[i] = agents.group(node.pg_name, *members).of()[0][static_cast<std::size_t>(peer_of[i])];
          break;
        }
      }
    }
    std::vector<std::vector<int>> waiters(n);  // other agents that depend on node i
    for (std::size_t i = 0; i < n; ++i) {
      for (std::uint64_t d : trace.nodes[i].deps) {
        const std::size_t j = index.at(d);
        auto& list = waiters[j];
        if (agent_of[j] != agent_of[i] && std::find(list.begin(), list.end(), agent_of[i]) == list.end())
          list.push_back(agent_of[i]);
      }
    }

    // Steps, in the graph's order. signal[(from, to)]: the messages of no bytes `from` has
    // posted to `to` so far; heard[(to, from)]: those `to` has waited for.
    std::map<std::pair<int, int>, int> posted, heard;
    std::vector<std::map<int, int>> signal_of(n);  // node -> (waiting agent -> its message's number, from 1)
    std::map<std::string, int>& occurrence = issued[rank];
    for (std::size_t i : order) {
      const ChakraNode& node = trace.nodes[i];
      const std::string where = path + ": node " + std::to_string(node.id);
      const int a = agent_of[i];
      // Wait for the dependencies other agents run.
      WorkStep wait;
      for (std::uint64_t d : node.deps) {
        const std::size_t j = index.at(d);
        const int from = agent_of[j];
        if (from == a) continue;
        int& got = heard[{a, from}];
        for (const int need = signal_of[j].at(a); got < need; ++got) wait.recvs.push_back({from, 0});
      }
      if (!wait.recvs.empty()) w.agents[static_cast<std::size_t>(a)].steps.push_back(std::move(wait));
      const Time duration = gaps ? static_cast<Time>(node.duration_us) * kUs : 0;
      WorkStep done;  // the node's last step: its signals to the agents waiting for it
      for (int to : waiters[i]) {
        done.sends.push_back({to, 0});
        signal_of[i][to] = ++posted[{a, to}];
      }
      switch (unit_of(node, path)) {
        case Unit::kGpu:
        case Unit::kCpu: done.gap = duration; break;
        case Unit::kSend:
        case Unit::kRecv: {
          const bool send = node.type == static_cast<int>(ChakraNodeType::kSend);
          WorkStep xfer;
          const int other = agents.p2p(peer_of[i], rank, node.comm_tag, send ? 1 : 0);
          (send ? xfer.sends : xfer.recvs).push_back({other, node.comm_size});
          w.agents[static_cast<std::size_t>(a)].steps.push_back(std::move(xfer));
          break;
        }
        case Unit::kGroup: {
          const std::vector<int>& members = *members_of[i];
          const algo::Collective c = collective_of(node.comm_type, where);
          const int gw = static_cast<int>(members.size());
          const int me = peer_of[i];
          const CollectiveKey key{node.pg_name, occurrence[node.pg_name]++};
          auto seen = collectives.find(key);
          if (seen == collectives.end()) {
            // NCCL's pick where the cost model covers the collective on these GPUs, else the
            // registry's first algorithm for it; made once, on the first rank that has it.
            std::vector<int> group_gpus;
            for (int m : members) group_gpus.push_back(gpus[static_cast<std::size_t>(m)]);
            CollectiveChoice choice;
            try {
              choice = choose(c, "auto", node.comm_size, t, group_gpus);
            } catch (const ConfigError&) {
              choice.algorithm.clear();
            }
            if (choice.algorithm.empty() || choice.algorithm == "in_network")  // (switch reducers: not for traces)
              choice = choose(c, algo::algorithm_names(c).front(), node.comm_size, t, group_gpus);
            const int ci = static_cast<int>(w.collectives.size());
            w.collectives.push_back({choice.name(c), job, gw, node.comm_size, algo::busbw_factor(c, gw), choice.launch,
                                     choice.ready, choice.predicted_us});
            seen = collectives.emplace(key, CollectiveSeen{ci, node.comm_type, node.comm_size, rank, choice}).first;
          } else if (seen->second.type != node.comm_type || seen->second.bytes != node.comm_size) {
            throw ConfigError(where + ": collective " + std::to_string(key.occurrence + 1) + " of process group '" +
                              node.pg_name + "' is " + chakra_collective_name(node.comm_type) + " of " +
                              std::to_string(node.comm_size) + " bytes here, " +
                              chakra_collective_name(seen->second.type) + " of " + std::to_string(seen->second.bytes) +
                              " bytes on rank " + std::to_string(seen->second.first_rank));
          }
          const CollectiveChoice& choice = seen->second.choice;
          // Whole f32 elements where the size allows, else bytes; all-to-all: whole elements per peer.
          const std::int64_t element = node.comm_size % 4 == 0 ? 4 : 1;
          std::int64_t count = c == algo::Collective::kBarrier ? 0 : node.comm_size / element;
          if (c == algo::Collective::kAllToAll) count = (count + gw - 1) / gw * gw;
          algo::Options opts;
          opts.local_world = t.gpus_per_host > 1 && gw % t.gpus_per_host == 0 ? t.gpus_per_host : 0;
          opts.channels_per_rail = rings_per_rail(w, node.comm_size, opts.local_world, choice.protocol);
          const algo::Program p = algo::build_program(c, choice.algorithm, me, gw, count, opts);
          ChannelAgents& group = agents.group(node.pg_name, members);
          group.cover(p);
          const auto& of = group.of();
          if (of.size() == 1) {
            append_program(w.agents[static_cast<std::size_t>(a)], p, element, of, seen->second.index, choice.launch,
                           choice.protocol);
            break;
          }
          std::vector<int> others;
          for (std::size_t ch = 1; ch < of.size(); ++ch) others.push_back(of[ch][static_cast<std::size_t>(me)]);
          release(w, a, others);
          for (std::size_t ch = 0; ch < of.size(); ++ch)
            append_program(w.agents[static_cast<std::size_t>(of[ch][static_cast<std::size_t>(me)])], p, element, of,
                           seen->second.index, choice.launch, choice.protocol, static_cast<int>(ch));
          gather(w, a, others);
          break;
        }
      }
      if (done.gap > 0 || !done.sends.empty()) w.agents[static_cast<std::size_t>(a)].steps.push_back(std::move(done));
    }
  }
  // Every member of a group issues its collectives (else the others wait forever).
  for (const auto& [key, seen] : collectives) {
    if (key.occurrence != 0) continue;
    const std::vector<int>& members = key.group.empty() ? everyone : groups.at(key.group);
    const int want = issued[seen.first_rank][key.group];
    for (int m : members)
      if (issued[m][key.group] != want)
        throw ConfigError("trace folder " + dir + ": process group '" + key.group + "': rank " +
                          std::to_string(seen.first_rank) + " has " + std::to_string(want) + " collectives, rank " +
                          std::to_string(m) + " has " + std::to_string(issued[m][key.group]));
  }
  return true;
}

}  // namespace weft::sim
