#include "weft/sim/report.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <memory>
#include <tuple>

#include "weft/util/error.h"
#include "weft/util/file.h"
#include "weft/util/stats.h"
#include "weft/util/units.h"

namespace weft::sim {
namespace {

// One CSV row built cell by cell: integers and fixed-point numbers through std::to_chars.
class CsvRow {
 public:
  void start() {
    text_.clear();
    first_ = true;
  }
  CsvRow& text(std::string_view s) {
    separate();
    text_.append(s);
    return *this;
  }
  CsvRow& integer(long long v) {
    char b[24];
    return text(std::string_view(b, static_cast<std::size_t>(std::to_chars(b, b + sizeof b, v).ptr - b)));
  }
  CsvRow& fixed(double v, int digits) {
    char b[400];  // the largest double, fixed, with its digits
    const auto r = std::to_chars(b, b + sizeof b, v, std::chars_format::fixed, digits);
    return text(std::string_view(b, static_cast<std::size_t>(r.ptr - b)));
  }
  std::string_view end() {
    text_ += '\n';
    return text_;
  }

 private:
  void separate() {
    if (!first_) text_ += ',';
    first_ = false;
  }
  std::string text_;
  bool first_ = true;
};

// A port's paused time on all queues up to the end of the run, pauses still on included (a
// pause storm that never ended paused the port until the end).
Time paused_time(const Network& net, const Port& p) {
  Time t = 0;
  for (int q = 0; q < 8; ++q) {
    t += p.c[q].paused_total;
    if (p.c[q].paused_since != kNever && net.finish_time() > p.c[q].paused_since) t += net.finish_time() - p.c[q].paused_since;
  }
  return t;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// For every switch, its ports grouped by the role of the node at the other end (a rail
// switch's uplinks to spines, a spine's downlinks to rails ...): the busiest port's share.
int tier_rank(const std::string& role) {
  if (role == "rail" || role == "leaf" || role == "edge" || role == "switch") return 1;
  if (role == "spine" || role == "agg") return 2;
  if (role == "super-spine" || role == "core") return 3;
  return 0;  // gpu, nic, nvswitch
}

// The chance under which a lopsided group of uplinks is called hash polarization.
constexpr double kPolarizationChance = 0.05;

struct Imbalance {
  std::string node, peer_role, busiest_peer;
  int ports = 0;           // distinct peers
  double share = 0;        // the busiest peer's share of the group's bytes
  long long flows = -1;    // queue pairs whose ECMP choice the group made (-1: not ECMP)
  long long busiest_flows = 0;  // of them, the busiest peer's
  // How likely hashing each of `flows` to a port uniformly at random gives some peer at
  // least as many as the busiest peer got: a union bound over the peers, at most 1.
  double chance = 1;
};

// Each port's queue pairs under ECMP: the ports a packet of each QP's 5-tuple takes (the
// path the fluid mode and the switches' hash give it); empty for other load balancing.
std::vector<long long> ecmp_flows_per_port(const Network& net) {
  if (net.config().lb != LoadBalancing::kEcmp) return {};
  std::vector<long long> flows(net.ports().size(), 0);
  for (std::size_t qp = 0; qp < net.qps().size(); ++qp) {
    if (net.qps()[qp].src < 0 || net.qps()[qp].dst < 0) continue;
    for (int port : net.qp_path(static_cast<int>(qp))) ++flows[static_cast<std::size_t>(port)];
  }
  return flows;
}

std::vector<Imbalance> imbalances(const Network& net) {
  const Topology& t = net.topology();
  std::map<std::pair<int, std::string>, std::vector<int>> groups;
  for (std::size_t p = 0; p < net.ports().size(); ++p) {
    const Port& P = net.ports()[p];
    const Node& n = t.nodes[P.node];
    const Node& peer = t.nodes[P.peer_node];
    // Only paths up the tree (rail/leaf/edge -> spine/agg -> super-spine/core) are
    // alternatives for the same traffic.
    if (n.kind != NodeKind::kSwitch || tier_rank(peer.role) <= tier_rank(n.role)) continue;
    groups[{P.node, peer.role}].push_back(static_cast<int>(p));
  }
  const std::vector<long long> flows = ecmp_flows_per_port(net);
  std::vector<Imbalance> out;
  for (const auto& [key, ports] : groups) {
    // Distinct peers: parallel links to one peer count together.
    struct Peer {
      std::int64_t bytes = 0;
      long long flows = 0;
      int ports = 0;
    };
    std::map<int, Peer> by_peer;
    for (int p : ports) {
      Peer& peer = by_peer[net.ports()[p].peer_node];
      peer.bytes += net.ports()[p].tx_payload;
      peer.flows += flows.empty() ? 0 : flows[static_cast<std::size_t>(p)];
      ++peer.ports;
    }
    if (by_peer.size() < 2) continue;
    std::int64_t total = 0;
    long long total_flows = 0;
    const std::pair<const int, Peer>* best = nullptr;
    for (const auto& entry : by_peer) {
      total += entry.second.bytes;
      total_flows += entry.second.flows;
      if (!best || entry.second.bytes > best->second.bytes) best = &entry;
    }
    if (total == 0) continue;
    Imbalance i{t.nodes[key.first].name, key.second, t.nodes[best->first].name, static_cast<int>(by_peer.size()),
                static_cast<double>(best->second.bytes) / static_cast<double>(total)};
    if (!flows.empty()) {
      i.flows = total_flows;
      i.busiest_flows = best->second.flows;
      const double p = static_cast<double>(best->second.ports) / static_cast<double>(ports.size());
      i.chance = std::min(1.0, static_cast<double>(by_peer.size()) * binomial_upper_tail(total_flows, p, best->second.flows));
    }
    out.push_back(std::move(i));
  }
  return out;
}

// The collectives some rank has steps of still to run (a run that did not finish): their
// times so far are no collective's time.
std::vector<bool> unfinished_collectives(const Network& net) {
  std::vector<bool> unfinished(net.workload().collectives.size(), false);
  for (std::size_t a = 0; a < net.agents().count(); ++a) {
    const AgentState& st = net.agents().state(static_cast<int>(a));
    if (st.done) continue;
    const auto& steps = net.workload().agents[a].steps;
    for (std::size_t k = st.step; k < steps.size(); ++k)
      if (steps[k].collective >= 0) unfinished[static_cast<std::size_t>(steps[k].collective)] = true;
  }
  return unfinished;
}

// The summary with the groups of uplinks already measured (imbalances: the ECMP path of
// every queue pair), which print_summary shares with its own line.
nlohmann::json summary_json_with(const Network& net, const std::vector<Imbalance>& imbalance_groups) {
  using nlohmann::json;
  const Topology& t = net.topology();
  const Counters& c = net.counters();
  json j;
  int switches = 0;
  for (const Node& n : t.nodes) switches += n.kind == NodeKind::kSwitch;
  j["topology"] = {{"name", t.name}, {"fabric", t.fabric}, {"gpus", t.gpu_count()}, {"switches", switches},
                   {"links", t.links.size()}};
  j["finished"] = net.agents_unfinished() == 0;
  if (net.agents_unfinished() > 0) {  // what the run is stuck on
    const Stall& stall = net.stall();
    json ranks = json::array(), cycle = json::array(), ports = json::array(), unroutable = json::array();
    for (const RankWait& r : stall.waits) {
      json from = json::array();
      for (const auto& [peer, count] : r.receives) from.push_back({{"rank", agent_name(net.workload(), peer)}, {"messages", count}});
      ranks.push_back({{"rank", agent_name(net.workload(), r.agent)}, {"step", r.step + 1}, {"steps", r.steps},
                       {"computing", !r.started}, {"waiting_for", from}, {"unacknowledged_sends", r.unacknowledged.size()}});
    }
    for (int a : stall.rank_cycle) cycle.push_back(agent_name(net.workload(), a));
    for (int p : stall.pfc_cycle) ports.push_back(net.port_name(p));
    for (const auto& [from, to] : stall.unroutable)
      unroutable.push_back({agent_name(net.workload(), from), agent_name(net.workload(), to)});
    j["stall"] = {{"reason", stall.time_limit ? "time_limit" : "no_event_left"}, {"ranks", ranks}, {"deadlock", cycle},
                  {"pfc_deadlock", {{"class", stall.pfc_queue}, {"links", ports}}}, {"unroutable", unroutable}};
  }
  j["simulated_us"] = to_us(net.finish_time());
  j["sample_interval_us"] = to_us(net.config().sample_interval);  // queues.csv, counters.csv
  j["events"] = net.events_run();  // wall-clock figures are printed, not stored: same seed, same files
  j["peak_packets"] = net.peak_packets();
  json colls = json::array();
  const auto& times = net.collective_times();
  const std::vector<bool> unfinished = unfinished_collectives(net);
  for (std::size_t i = 0; i < net.workload().collectives.size(); ++i) {
    const CollectiveInfo& ci = net.workload().collectives[i];
    json e = {{"name", ci.name}, {"job", ci.job}, {"ranks", ci.ranks}, {"bytes", ci.bytes}};
    if (ci.predicted_us > 0) e["predicted_us"] = ci.predicted_us;  // the cost model's, for "auto"
    if (unfinished[i]) e["finished"] = false;
    if (!unfinished[i] && times[i].first != kNever && times[i].second >= times[i].first) {
      double s = to_seconds(times[i].second - times[i].first);
      e["start_us"] = to_us(times[i].first);
      e["time_us"] = s * 1e6;
      e["algbw_GBps"] = s > 0 ? static_cast<double>(ci.bytes) / s / 1e9 : 0.0;
      e["busbw_GBps"] = s > 0 ? static_cast<double>(ci.bytes) / s / 1e9 * ci.busbw_factor : 0.0;
    }
    colls.push_back(e);
  }
  j["collectives"] = colls;
  std::vector<double> fct;
  for (const FlowRecord& f : net.flows())
    if (f.delivered >= f.start && f.parts_left_rx == 0) fct.push_back(to_us(f.delivered - f.start));
  double mean = 0;
  for (double v : fct) mean += v;
  if (!fct.empty()) mean /= static_cast<double>(fct.size());
  std::sort(fct.begin(), fct.end());  // once, for the three percentiles (millions of flows)
  j["flows"] = {{"count", net.flows().size()},
                {"completed", fct.size()},
                {"fct_mean_us", mean},
                {"fct_p50_us", percentile_of_sorted(fct, 0.5)},
                {"fct_p99_us", percentile_of_sorted(fct, 0.99)},
                {"fct_max_us", percentile_of_sorted(fct, 1.0)}};
  Time paused = 0;
  for (const Port& p : net.ports()) paused += paused_time(net, p);
  j["counters"] = {{"ecn_marks", c.ecn_marks},         {"cnps", c.cnps},
                   {"pfc_pauses", c.pauses},           {"pfc_resumes", c.resumes},
                   {"pfc_paused_us", to_us(paused)},   {"drops", c.drops},
                   {"headroom_drops", c.headroom_drops}, {"retransmissions", c.retransmissions},
                   {"out_of_order", c.out_of_order},   {"reordered_write_only", c.reordered}, {"naks", c.naks},
                   {"timeouts", c.timeouts},           {"duplicates", c.duplicates},
                   {"watchdog_storms", c.watchdog_storms}, {"lost_on_failure", c.lost_on_failure}, {"corrupted", c.corrupted},
                   {"trimmed", c.trimmed},
                   {"data_packets", c.data_packets},   {"bytes_sent", c.bytes_sent},
                   {"bytes_delivered", c.bytes_delivered}};
  json imb = json::array();
  for (const Imbalance& i : imbalance_groups) {
    json entry = {{"switch", i.node}, {"toward", i.peer_role}, {"ports", i.ports}, {"busiest", i.busiest_peer}, {"share", i.share}};
    if (i.flows >= 0) {
      entry["flows"] = i.flows;
      entry["busiest_flows"] = i.busiest_flows;
      entry["chance"] = i.chance;
    }
    imb.push_back(std::move(entry));
  }
  j["load_balance"] = imb;
  json cfg;
  for (const ConfigKey& k : config_keys()) cfg[k.key] = describe_value(net.config(), k.key);
  j["config"] = cfg;
  return j;
}

}  // namespace

nlohmann::json summary_json(const Network& net) { return summary_json_with(net, imbalances(net)); }

void print_summary(const Network& net, std::FILE* out, const std::string& out_dir) {
  const Topology& t = net.topology();
  const Counters& c = net.counters();
  int switches = 0;
  for (const Node& n : t.nodes) switches += n.kind == NodeKind::kSwitch;
  std::fprintf(out, "weft sim: %s (%zu GPUs, %d switches, %zu links)\n", t.name.c_str(), static_cast<std::size_t>(t.gpu_count()), switches,
               t.links.size());
  double eps = net.wall_seconds() > 0 ? static_cast<double>(net.events_run()) / net.wall_seconds() : 0;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  // How fast it ran, said alike whether it finished or not.
  const std::string speed = fmt::format("wall {:.2f} s, {:.2f} M events/s, peak memory {:.0f} MiB", net.wall_seconds(),
                                        eps / 1e6, static_cast<double>(usage.ru_maxrss) / 1024);
  if (net.agents_unfinished() == 0)
    std::fprintf(out, "finished at %.3f us simulated (%s)\n", to_us(net.finish_time()), speed.c_str());
  else {
    const Stall& stall = net.stall();
    std::fprintf(out, "NOT finished: %d ranks still waiting at %.3f us simulated (%s)\n", net.agents_unfinished(),
                 to_us(net.finish_time()),
                 stall.time_limit ? "stopped at sim.time_limit" : "no event left: nothing can move");
    std::fprintf(out, "stopped after %s\n", speed.c_str());
    for (const std::string& line : describe_stall(net, stall)) std::fprintf(out, "%s\n", line.c_str());
  }
  if (net.threads() > 1) {
    const std::vector<std::uint64_t> events = net.events_per_thread();
    std::uint64_t busiest = 0, all = 0;
    std::string each;
    for (std::uint64_t e : events) {
      busiest = std::max(busiest, e);
      all += e;
      each += fmt::format("{}{:.2f}M", each.empty() ? "" : ", ", static_cast<double>(e) / 1e6);
    }
    const double balance = all > 0 ? static_cast<double>(busiest) * static_cast<double>(events.size()) / static_cast<double>(all) : 1;
    std::fprintf(out,
                 "parallel engine: %d threads, time windows of up to %.3f us, %llu of %llu windows side by side; events per "
                 "thread %s (the busiest %.2fx the mean)\n",
                 net.threads(), to_us(net.window()), static_cast<unsigned long long>(net.windows_side_by_side()),
                 static_cast<unsigned long long>(net.windows()), each.c_str(), balance);
  }
  else if (!net.single_thread_reason().empty())
    std::fprintf(out, "parallel engine: one thread (%s)\n", net.single_thread_reason().c_str());
  if (net.config().mode == SimMode::kFlow)
    std::fprintf(out, "flow-level mode: rates recomputed %llu times, for %llu message parts in all\n",
                 static_cast<unsigned long long>(net.fluid_rounds()), static_cast<unsigned long long>(net.fluid_parts_recomputed()));
  if (net.config().pxn)
    std::fprintf(out, "pxn: %d sender-receiver pairs relayed through an NVLink peer on the receiver's rail\n", net.pxn_relays());
  // Collectives of the same kind, size and group size together: count, mean time, bandwidths.
  const auto& times = net.collective_times();
  struct Kind {
    int count = 0;
    double seconds = 0, max_seconds = 0;
  };
  std::map<std::tuple<std::string, std::int64_t, int>, Kind> kinds;
  std::vector<std::tuple<std::string, std::int64_t, int>> order;
  const std::vector<bool> unfinished = unfinished_collectives(net);
  std::size_t not_finished = 0;
  for (std::size_t i = 0; i < net.workload().collectives.size(); ++i) {
    const CollectiveInfo& ci = net.workload().collectives[i];
    if (unfinished[i]) {
      if (++not_finished <= 4)
        std::fprintf(out, "collective %s, %s on %d ranks: not finished\n", ci.name.c_str(), human_bytes(ci.bytes).c_str(),
                     ci.ranks);
      continue;
    }
    if (times[i].first == kNever || times[i].second < times[i].first) continue;
    auto key = std::make_tuple(ci.name, ci.bytes, ci.ranks);
    if (!kinds.count(key)) order.push_back(key);
    Kind& k = kinds[key];
    double s = to_seconds(times[i].second - times[i].first);
    ++k.count;
    k.seconds += s;
    k.max_seconds = std::max(k.max_seconds, s);
  }
  for (std::size_t i = 0; i < order.size() && i < 12; ++i) {
    const auto& [name, bytes, ranks] = order[i];
    const Kind& k = kinds[order[i]];
    double s = k.seconds / k.count;
    double factor = 1, predicted = 0;
    for (const CollectiveInfo& ci : net.workload().collectives)
      if (ci.name == name && ci.ranks == ranks) {
        factor = ci.busbw_factor;
        predicted = ci.predicted_us;
      }
    std::string times_text = k.count > 1 ? " x" + std::to_string(k.count) + ", mean" : "";
    std::string model = predicted > 0 ? fmt::format(" (chosen by the cost model, which predicts {:.3f} us)", predicted) : "";
    std::fprintf(out, "collective %s, %s on %d ranks%s: %.3f us, algbw %.2f GB/s, busbw %.2f GB/s%s\n", name.c_str(),
                 human_bytes(bytes).c_str(), ranks, times_text.c_str(), s * 1e6, s > 0 ? bytes / s / 1e9 : 0.0,
                 s > 0 ? bytes / s / 1e9 * factor : 0.0, model.c_str());
  }
  if (not_finished > 4) std::fprintf(out, "... %zu more collectives not finished\n", not_finished - 4);
  if (order.size() > 12) std::fprintf(out, "... %zu more kinds of collective in summary.json\n", order.size() - 12);
  const std::vector<Imbalance> imb = imbalances(net);
  auto j = summary_json_with(net, imb);
  // The completion times are the completed flows': a run stopped early says how many those are.
  const std::size_t completed = j["flows"]["completed"].get<std::size_t>();
  if (completed == 0 && !net.flows().empty())
    std::fprintf(out, "flows: %zu, none completed\n", net.flows().size());
  else
    std::fprintf(out, "flows: %zu%s, completion mean %.3f us, p99 %.3f us, max %.3f us\n", net.flows().size(),
                 completed < net.flows().size() ? fmt::format(" ({} completed)", completed).c_str() : "",
                 j["flows"]["fct_mean_us"].get<double>(), j["flows"]["fct_p99_us"].get<double>(),
                 j["flows"]["fct_max_us"].get<double>());
  std::fprintf(out,
               "congestion: %lld ECN marks, %lld CNPs, %lld PFC pauses (%.3f us paused in all), %lld drops, "
               "%lld retransmissions, %lld out-of-order arrivals\n",
               static_cast<long long>(c.ecn_marks), static_cast<long long>(c.cnps), static_cast<long long>(c.pauses),
               j["counters"]["pfc_paused_us"].get<double>(), static_cast<long long>(c.drops),
               static_cast<long long>(c.retransmissions), static_cast<long long>(c.out_of_order));
  if (c.reordered)
    std::fprintf(out, "write-only: %lld packets arrived ahead of a missing one and were placed directly\n",
                 static_cast<long long>(c.reordered));
  if (c.watchdog_storms) std::fprintf(out, "PFC watchdog: %lld pause storms broken\n", static_cast<long long>(c.watchdog_storms));
  if (c.lost_on_failure) std::fprintf(out, "failures: %lld packets lost on failed links\n", static_cast<long long>(c.lost_on_failure));
  if (c.corrupted) std::fprintf(out, "link errors: %lld frames lost on the wire\n", static_cast<long long>(c.corrupted));
  if (c.trimmed)
    std::fprintf(out, "trimming: %lld packets cut to their headers by switches and resent at the receiver's NACK\n",
                 static_cast<long long>(c.trimmed));
  // The busiest fabric link (GPU-side NVLink and PCIe excluded).
  int busiest = -1;
  double util = 0;
  Time span = std::max<Time>(net.finish_time(), 1);
  for (std::size_t p = 0; p < net.ports().size(); ++p) {
    const Port& P = net.ports()[p];
    const std::string& tier = t.links[P.link].tier;
    if (tier == "nvlink" || tier == "pcie") continue;
    // Frames are counted when they start, so a short window can hold one more than fits.
    double u = std::min(1.0, static_cast<double>(P.tx_bytes) * 8 / (P.bps * to_seconds(span)));
    if (u > util) {
      util = u;
      busiest = static_cast<int>(p);
    }
  }
  if (busiest >= 0) std::fprintf(out, "busiest link: %s, %.0f%% utilized\n", net.port_name(busiest).c_str(), 100 * util);
  // Load balance: the most lopsided group of parallel paths up the tree. Under ECMP it is
  // called hash polarization only when random hashing would make any of the groups that
  // lopsided less than 5% of the time (the group's chance times the number of groups): a
  // group of a few flows is lopsided by chance (one flow puts all its bytes on one uplink).
  const Imbalance* worst = nullptr;
  const Imbalance* unlikeliest = nullptr;
  int uplink_groups = 0;
  for (const Imbalance& i : imb)
    if (i.peer_role == "spine" || i.peer_role == "super-spine" || i.peer_role == "agg" || i.peer_role == "core") {
      ++uplink_groups;
      if (!worst || i.share * i.ports > worst->share * worst->ports) worst = &i;
      if (i.flows >= 0 && (!unlikeliest || i.chance < unlikeliest->chance)) unlikeliest = &i;
    }
  const bool polarized = unlikeliest && unlikeliest->share * unlikeliest->ports > 1.5 &&
                         unlikeliest->chance * uplink_groups < kPolarizationChance;
  if (const Imbalance* shown = polarized ? unlikeliest : worst) {
    const double fair = 1.0 / shown->ports;
    std::string flows;
    if (polarized)
      flows = fmt::format("; {} of its {} flows there: random hashing does that with chance {:.2g}", shown->busiest_flows,
                          shown->flows, std::min(1.0, shown->chance * uplink_groups));
    else if (shown->flows >= 0)
      flows = fmt::format("; {} flow{}, as lopsided as random hashing may leave them", shown->flows, shown->flows == 1 ? "" : "s");
    std::fprintf(out, "%s: %s carried %.0f%% of %s's uplink bytes (%d uplink switches, fair share %.0f%%%s)\n",
                 polarized ? "hash polarization" : "load balance", shown->busiest_peer.c_str(), 100 * shown->share,
                 shown->node.c_str(), shown->ports, 100 * fair, flows.c_str());
  }
  if (!out_dir.empty())
    std::fprintf(out, "outputs in %s: summary.json flows.csv links.csv queues.csv pfc.csv counters.csv nodes.csv%s\n", out_dir.c_str(),
                 net.config().sample_qps ? " qps.csv" : "");
}

namespace {

// Each CSV file's name and header: the first line emit_outputs writes, and what tells an
// earlier run's file (check_outputs).
constexpr std::pair<std::string_view, std::string_view> kCsvHeaders[] = {
    {"flows.csv",
     "flow,src_gpu,dst_gpu,src,dst,bytes,delivered_bytes,start_us,delivered_us,acked_us,fct_us,collective,ideal_fct_us,"
     "slowdown\n"},
    {"links.csv",
     "port,from,to,tier,gbps,tx_bytes,tx_payload,utilization,ecn_marks,drops,pauses_sent,resumes_sent,pauses_received,"
     "paused_us,max_queue_bytes\n"},
    {"queues.csv", "time_us,port,queue,bytes\n"},
    {"pfc.csv", "time_us,from,to,queue,frame\n"},
    {"counters.csv", "time_us,ecn_marks,cnps,pfc_pauses,pfc_resumes,drops,retransmissions,timeouts,bytes_delivered\n"},
    {"qps.csv",
     "time_us,qp,src_gpu,dst_gpu,delivered_gbps,cnps,dcqcn_rate_gbps,dcqcn_target_gbps,dcqcn_alpha,window_bytes,rtt_us,"
     "hpcc_utilization\n"},
    {"nodes.csv", "node,role,gpu_rank\n"},
};

std::string_view csv_header(std::string_view name) {
  for (const auto& [file, header] : kCsvHeaders)
    if (file == name) return header;
  throw Error("no CSV output named " + std::string(name));
}

}  // namespace

void emit_outputs(const Network& net, OutputSink& out) {
  const Topology& t = net.topology();
  bool opened = false;
  auto open = [&](const char* name, std::string_view header) {
    if (opened) out.close();
    out.open(name);
    opened = true;
    out.write(header);
  };
  auto open_csv = [&](const char* name) { open(name, csv_header(name)); };
  open("summary.json", summary_json(net).dump(2) + "\n");
  open_csv("flows.csv");
  // (Millions of rows in a large run: formatted with to_chars, which prints a double in
  // fixed notation exactly as printf's %.6f does, several times faster.)
  CsvRow row;
  for (std::size_t i = 0; i < net.flows().size(); ++i) {
    const FlowRecord& f = net.flows()[i];
    const bool done = f.parts_left_rx == 0;
    const Time ideal = net.ideal_fct(f.src_gpu, f.dst_gpu, f.bytes);
    row.start();
    row.integer(static_cast<long long>(i)).integer(f.src_gpu).integer(f.dst_gpu);
    row.text(t.nodes[t.gpus[f.src_gpu]].name).text(t.nodes[t.gpus[f.dst_gpu]].name);
    row.integer(f.bytes).integer(f.delivered_bytes).fixed(to_us(f.start), 6);
    if (done) row.fixed(to_us(f.delivered), 6); else row.text("");
    if (f.parts_left_tx == 0) row.fixed(to_us(f.acked), 6); else row.text("");
    if (done) row.fixed(to_us(f.delivered - f.start), 6); else row.text("");
    row.integer(f.collective);
    if (ideal > 0) row.fixed(to_us(ideal), 6); else row.text("");
    if (done && ideal > 0) row.fixed(static_cast<double>(f.delivered - f.start) / static_cast<double>(ideal), 4);
    else row.text("");
    out.write(row.end());
  }
  char buf[512];
  open_csv("links.csv");
  Time span = std::max<Time>(net.finish_time(), 1);
  for (std::size_t p = 0; p < net.ports().size(); ++p) {
    const Port& P = net.ports()[p];
    const Time paused = paused_time(net, P);
    std::int64_t maxq = 0;
    for (int q = 0; q < 8; ++q) maxq = std::max(maxq, P.c[q].max_queue_bytes);
    std::snprintf(buf, sizeof buf, "%zu,%s,%s,%s,%g,%lld,%lld,%.6f,%lld,%lld,%lld,%lld,%lld,%.6f,%lld\n", p,
                  t.nodes[P.node].name.c_str(), t.nodes[P.peer_node].name.c_str(), t.links[P.link].tier.c_str(),
                  P.bps / 1e9, static_cast<long long>(P.tx_bytes), static_cast<long long>(P.tx_payload),
                  std::min(1.0, static_cast<double>(P.tx_bytes) * 8 / (P.bps * to_seconds(span))),
                  static_cast<long long>(P.ecn_marks),
                  static_cast<long long>(P.drops), static_cast<long long>(P.pauses_sent), static_cast<long long>(P.resumes_sent),
                  static_cast<long long>(P.pauses_received), to_us(paused), static_cast<long long>(maxq));
    out.write(buf);
  }
  open_csv("queues.csv");
  for (const QueueSample& q : net.queue_samples()) {
    std::snprintf(buf, sizeof buf, "%.6f,%s,%d,%lld\n", to_us(q.at), net.port_name(q.port).c_str(), q.queue,
                  static_cast<long long>(q.bytes));
    out.write(buf);
  }
  open_csv("pfc.csv");
  for (const PfcEvent& e : net.pfc_events()) {
    const Port& P = net.ports()[e.port];
    std::snprintf(buf, sizeof buf, "%.6f,%s,%s,%d,%s\n", to_us(e.at), t.nodes[P.node].name.c_str(),
                  t.nodes[net.ports()[P.peer].node].name.c_str(), e.queue, e.pause ? "pause" : "resume");
    out.write(buf);
  }
  open_csv("counters.csv");
  for (const CounterSample& c : net.counter_samples()) {
    const Counters& k = c.counters;
    std::snprintf(buf, sizeof buf, "%.6f,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld\n", to_us(c.at),
                  static_cast<long long>(k.ecn_marks), static_cast<long long>(k.cnps), static_cast<long long>(k.pauses),
                  static_cast<long long>(k.resumes), static_cast<long long>(k.drops),
                  static_cast<long long>(k.retransmissions), static_cast<long long>(k.timeouts),
                  static_cast<long long>(k.bytes_delivered));
    out.write(buf);
  }
  if (net.config().sample_qps) {
    open_csv("qps.csv");
    const double interval = to_seconds(std::max<Time>(net.config().sample_interval, 1));
    for (const QpSample& q : net.qp_samples()) {
      const QueuePair& Q = net.qps()[static_cast<std::size_t>(q.qp)];
      const bool limited = q.rate > 0;  // else at line rate: no rate or target to show
      const bool windowed = q.window > 0;
      std::snprintf(buf, sizeof buf, "%.6f,%d,%d,%d,%.4f,%lld,%s,%s,%.6f,%s,%s,%s\n", to_us(q.at), q.qp,
                    net.gpu_rank_of(Q.src), net.gpu_rank_of(Q.dst), static_cast<double>(q.delivered_bytes) * 8 / interval / 1e9,
                    static_cast<long long>(q.cnps), limited ? fmt("%.4f", q.rate / 1e9).c_str() : "",
                    limited && !windowed ? fmt("%.4f", q.target / 1e9).c_str() : "", q.alpha,
                    windowed ? fmt("%.0f", q.window).c_str() : "", q.rtt > 0 ? fmt("%.3f", to_us(q.rtt)).c_str() : "",
                    net.config().cc == CongestionControl::kHpcc ? fmt("%.4f", q.utilization).c_str() : "");
      out.write(buf);
    }
  }
  open_csv("nodes.csv");
  for (std::size_t n = 0; n < t.nodes.size(); ++n) {
    const int rank = net.gpu_rank_of(static_cast<int>(n));
    out.write(t.nodes[n].name + "," + t.nodes[n].role + "," + (rank < 0 ? std::string() : std::to_string(rank)) + "\n");
  }
  out.close();
}

std::vector<std::pair<std::string, std::string>> output_files(const Network& net) {
  struct Texts : OutputSink {
    std::vector<std::pair<std::string, std::string>> files;
    void open(const std::string& name) override { files.emplace_back(name, std::string()); }
    void write(std::string_view bytes) override { files.back().second += bytes; }
    void close() override {}
  } texts;
  emit_outputs(net, texts);
  return std::move(texts.files);
}

void write_outputs(const Network& net, const std::string& dir) {
  make_directories(dir);
  struct Files : OutputSink {
    std::string dir;
    std::unique_ptr<AtomicFileWriter> file;
    void open(const std::string& name) override { file = std::make_unique<AtomicFileWriter>(dir + "/" + name); }
    void write(std::string_view bytes) override { file->write(bytes); }
    void close() override { file->commit(); }
  } files;
  files.dir = dir;
  emit_outputs(net, files);
}

void check_outputs(const std::string& dir) {
  const std::string flag = "--out";
  // summary.json's keys are sorted, "collectives" (always written) first.
  check_replaceable_file(dir + "/summary.json", flag, "a simulation's summary",
                         [](std::string_view head) { return head.starts_with("{\n  \"collectives\": "); });
  // A CSV file by its first two columns' names (weft versions add columns at the end).
  for (const auto& [name, header] : kCsvHeaders)
    check_replaceable_file(dir + "/" + std::string(name), flag, "a simulation's " + std::string(name),
                           [first = header.substr(0, header.find(',', header.find(',') + 1) + 1)](std::string_view head) {
                             return head.starts_with(first);
                           });
  check_replaceable_file(dir + "/link.pcap", flag, "a capture (pcap)", [](std::string_view head) {
    return head.starts_with("\x4D\x3C\xB2\xA1") || head.starts_with("\xD4\xC3\xB2\xA1");
  });
}

}  // namespace weft::sim
