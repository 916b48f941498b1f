// weft sim: a training job's traffic on a modeled RoCEv2 fabric, packet by packet.
#include <cstdio>
#include <memory>
#include <optional>
#include <string_view>

#include "weft/cli/commands.h"
#include "weft/cli/flag_parser.h"
#include "weft/report/report.h"
#include "weft/report/simulation.h"
#include "weft/sim/network.h"
#include "weft/sim/report.h"
#include "weft/util/error.h"
#include "weft/util/file.h"
#include "weft/util/parse.h"

namespace weft::cli {

namespace {
struct SimFlags {
  std::string topology, workload, out, lb, cc, pfc, report;
  std::vector<std::string> settings;
  std::optional<std::int64_t> seed;
  bool list_keys = false, quiet = false;
};

// weft sim's flags; the fabric's parameters are sim/config.h's keys (--set KEY=VALUE).
const FlagTable<SimFlags>& sim_flags() {
  using F = Flag<SimFlags>;
#define AT(member) [](SimFlags& o) -> FieldRef { return &o.member; }
  static const FlagTable<SimFlags> table = [] {
    FlagTable<SimFlags> t;
    const FlagGroup<SimFlags> what{t, "what runs on what"}, fabric{t, "the fabric"}, out{t, "output"};
    what(F("--topology", AT(topology), "topology YAML (examples/topologies/)"));
    what(F("--workload", AT(workload),
                "trace folder (WEFT_TRACE), job file (.yaml), COLLECTIVE:ALGORITHM:SIZE[@GPUS] (ALGORITHM: a comm-bench "
                "algorithm, ALGORITHM/ll|ll128|simple with a GPU protocol's costs, auto for NCCL's cost model, or "
                "in_network on switches that reduce), permutation:SIZE, incast:N:SIZE, alltoall:SIZE, flow:SRC:DST:SIZE"));
    fabric(F("--lb", AT(lb), "load balancing: ecmp, flowlet, spray or adaptive (the key lb)"));
    fabric(F("--cc", AT(cc), "congestion control: dcqcn, hpcc, swift, nscc or none (the key cc)"));
    fabric(F("--pfc", AT(pfc), "priority flow control: on or off (the key pfc)"));
    fabric(F("--set", AT(settings), "KEY=VALUE, repeatable: any parameter of --list-keys"));
    fabric(F("--seed", AT(seed), "random seed (the key seed)").defaults("0").at_least(0));
    out(F("--out", AT(out), "folder for summary.json and the CSV files (flows, links, queues, pfc, counters, nodes)"));
    out(F("--report", AT(report), "write an HTML report of the run (docs/reports.md)"));
    out(F("--list-keys", AT(list_keys), "print every parameter with its default and exit"));
    out(F("--quiet", AT(quiet), "no progress lines"));
    return t;
  }();
#undef AT
  return table;
}

int run_sim(const SimFlags& f) {
  sim::SimConfig config;
  if (f.list_keys) {
    std::printf("%-22s %-10s %-14s %s\n", "key", "kind", "default", "meaning");
    for (const sim::ConfigKey& k : sim::config_keys())
      std::printf("%-22s %-10s %-14s %s\n", k.key.c_str(), k.kind.c_str(), sim::describe_value(config, k.key).c_str(),
                  k.help.c_str());
    return 0;
  }
  if (f.topology.empty()) throw ConfigError("weft sim needs --topology FILE (see examples/topologies/)");
  if (f.workload.empty()) throw ConfigError("weft sim needs --workload (a trace folder, a job file, or e.g. allreduce:ring:64MB)");
  if (!f.lb.empty()) sim::apply_setting(config, "lb=" + f.lb);
  if (!f.cc.empty()) sim::apply_setting(config, "cc=" + f.cc);
  if (!f.pfc.empty()) sim::apply_setting(config, "pfc=" + f.pfc);
  if (f.seed) sim::apply_setting(config, "seed=" + std::to_string(*f.seed));
  for (const std::string& s : f.settings) sim::apply_setting(config, s);
  sim::finalize_config(config);
  // Everything that can be refused is refused before the work: the output paths, the
  // capture's link, then the fabric and the configuration (Network::check_setup), and only
  // then the workload is built (a collective over many ranks takes seconds and gigabytes).
  std::optional<std::pair<std::string_view, std::string_view>> capture;
  if (!config.pcap_link.empty()) {
    if (f.out.empty()) throw ConfigError("--set pcap=A:B needs --out DIR for the capture file");
    capture = split_pair(config.pcap_link);
    if (!capture) throw ConfigError("pcap: expected two node names, A:B");
  }
  if (!f.out.empty()) check_output_folder(f.out, "--out"), sim::check_outputs(f.out);
  if (!f.report.empty()) report::check_page_path(f.report, "--report");
  sim::Topology topology = sim::load_topology(f.topology);
  if (capture) topology.link_between(std::string(capture->first), std::string(capture->second), "pcap");
  sim::Network::check_setup(topology, config, sim::Workload{});
  sim::Workload workload = sim::load_workload(f.workload, topology, config.seed, config.channels_per_nic);
  auto net = std::make_unique<sim::Network>(topology, config, std::move(workload));
  if (capture) {
    make_directories(f.out);
    net->capture(std::string(capture->first), std::string(capture->second), f.out + "/link.pcap");
  }
  bool finished = net->run(!f.quiet);
  if (!f.out.empty()) sim::write_outputs(*net, f.out);
  sim::print_summary(*net, stdout, f.out);
  if (!f.report.empty()) {
    report::SimFiles files;
    for (auto& [name, text] : sim::output_files(*net)) files[name] = std::move(text);
    report::Page page;
    page.title = "weft: simulation of " + topology.name;
    page.subtitle = "weft sim --topology " + f.topology + " --workload " + f.workload;
    page.footer = "Written by weft sim --report; docs/reports.md tells how to read each chart.";
    page.sections = report::simulation_sections(files, topology.name, 2000);
    const std::size_t bytes = report::write_page(page, f.report);
    std::printf("report: %s (%.0f KB)\n", f.report.c_str(), static_cast<double>(bytes) / 1e3);
  }
  return finished ? 0 : 3;
}
}  // namespace

FlagDocs sim_flag_docs() { return flag_docs(sim_flags()); }

void add_sim_command(CLI::App& app, Action& action) {
  auto f = std::make_shared<SimFlags>();
  CLI::App* cmd = app.add_subcommand("sim", "simulate a job's traffic on a modeled RoCEv2 AI fabric, packet by packet");
  add_flags(cmd, sim_flags(), *f);
  cmd->callback([f, &action] { action = [f] { return run_sim(*f); }; });
}

}  // namespace weft::cli
