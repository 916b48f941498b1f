#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <memory>

#include "weft/cli/commands.h"
#include "weft/cli/flag_parser.h"
#include "weft/comm/bench.h"
#include "weft/comm/auth.h"
#include "weft/comm/launcher.h"
#include "weft/comm/process.h"
#include "weft/util/env.h"
#include "weft/util/error.h"
#include "weft/util/file.h"
#include "weft/util/parse.h"
#include "weft/util/size.h"

namespace weft::cli {

namespace {

// "N" or "MIN:MAX" (--nnodes).
void parse_nnodes(const std::string& text, comm::LaunchConfig& c) {
  auto number = [&](std::string_view s) {
    const auto v = parse_integer(s);
    if (!v || *v < 0 || *v > 1 << 20) throw ConfigError("--nnodes: '" + text + "' is not N or MIN:MAX");
    return static_cast<int>(*v);
  };
  const auto range = split_pair(text);
  if (!range) {
    c.nnodes = number(text);
    return;
  }
  c.min_nodes = number(range->first);
  c.nnodes = number(range->second);
  if (c.min_nodes < 1) throw ConfigError("--nnodes MIN:MAX needs MIN >= 1");
}

// torchrun's --nproc-per-node: a number, or auto/cpu (this machine has no GPUs weft uses:
// the cores the launcher may run on).
int parse_nproc(const std::string& text) {
  if (text == "auto" || text == "cpu") return static_cast<int>(comm::allowed_cores().size());
  if (text == "gpu") throw ConfigError("--nproc-per-node gpu: weft runs its ranks on processors (use a number, auto or cpu)");
  const auto v = parse_integer(text);
  if (!v || *v < 1 || *v > 4096) throw ConfigError("--nproc-per-node must be a number from 1 to 4096 (or auto, cpu), got '" + text + "'");
  return static_cast<int>(*v);
}

// torchrun's --redirects/--tee: "3" for every local rank, or "0:1,1:2" per local rank
// (1 stdout, 2 stderr, 3 both).
std::vector<int> parse_streams(const std::string& text, int ranks, const char* flag) {
  auto refuse = [&] {
    return ConfigError(std::string(flag) + ": '" + text + "' is not 0-3 (1 stdout, 2 stderr, 3 both) or LOCAL_RANK:CODE,...");
  };
  auto code = [&](std::string_view s) {
    const auto v = parse_integer(s);
    if (!v || *v < 0 || *v > 3) throw refuse();
    return static_cast<int>(*v);
  };
  if (text.find(':') == std::string::npos) return std::vector<int>(static_cast<size_t>(ranks), code(text));
  std::vector<int> per(static_cast<size_t>(ranks), 0);
  const auto items = split_list(text, ',', 4096);
  if (!items) throw refuse();
  for (std::string_view item : *items) {
    const auto pair = split_pair(item);
    if (!pair) throw refuse();
    const auto rank = parse_integer(pair->first);
    if (!rank || *rank < 0 || *rank >= ranks)
      throw ConfigError(std::string(flag) + ": local rank '" + std::string(pair->first) + "' is outside 0.." +
                        std::to_string(ranks - 1));
    per[static_cast<size_t>(*rank)] = code(pair->second);
  }
  return per;
}

// HOST[:PORT] (--rdzv-endpoint; torchrun's default port is 29400).
void parse_endpoint(const std::string& text, comm::LaunchConfig& c) {
  const auto colon = text.rfind(':');
  c.master_addr = text.substr(0, colon);
  c.master_port = 29400;
  if (colon != std::string::npos) {
    const auto port = parse_integer(text.substr(colon + 1));
    if (!port || *port < 0 || *port > 65535) throw ConfigError("--rdzv-endpoint: '" + text + "' is not HOST[:PORT]");
    c.master_port = static_cast<int>(*port);
  }
  if (c.master_addr.empty()) throw ConfigError("--rdzv-endpoint: '" + text + "' names no host");
}

// weft launch's flags: torchrun's, with its spellings (--nproc_per_node), and weft's own for
// live jobs; the flags read as text (the _text ones) are parsed in the action into the
// launch configuration they extend.
struct LaunchFlags : comm::LaunchConfig {
  std::string nproc_text = "1", nnodes_text = "1", redirects_text, tee_text;
  std::string rdzv_backend = "static", rdzv_endpoint, rdzv_conf;
  bool standalone = false, no_prefix = false, no_python = false;
};

const FlagTable<LaunchFlags>& launch_flags() {
  using F = Flag<LaunchFlags>;
#define AT(member) [](LaunchFlags& o) -> FieldRef { return &o.member; }
  static const FlagTable<LaunchFlags> table = [] {
    FlagTable<LaunchFlags> t;
    const FlagGroup<LaunchFlags> job{t, "the job"}, meet{t, "rendezvous"}, out{t, "the ranks' output and command"};
    job(F("--nproc-per-node", AT(nproc_text), "ranks on this node: N, auto or cpu (one per core), or for a live job MIN:MAX "
                                              "(start MIN, and up to MAX when the job asks for more ranks)")
                 .also_named({"--nproc_per_node"}));
    job(F("--nnodes", AT(nnodes_text), "nodes in the job, or MIN:MAX to go on with fewer after a node is lost"));
    job(F("--node-rank", AT(node_rank), "this node's index").also_named({"--node_rank"}).at_least(0));
    job(F("--max-restarts", AT(max_restarts), "restart all ranks up to K times when one fails")
                 .also_named({"--max_restarts"}).at_least(0));
    job(F("--elastic", AT(elastic), "a live job: ranks join (weft launch --join) and leave (SIGTERM) while it runs, "
                                           "without restarts (weft train continues on the new ranks; needs WEFT_JOB_TOKEN)"));
    job(F("--join", AT(join), "HOST:PORT: add this launcher's ranks to the live job whose launcher printed it"));
    job(F("--join-timeout", AT(join_timeout_s), "--nnodes MIN:MAX: seconds an attempt waits for nodes beyond MIN")
                 .above(0));
    job(F("--bind", AT(bind), "cores: bind each rank to its share of the cores (ranks beyond the cores share them "
                                     "round-robin); none: leave the ranks free")
                 .one_of({"cores", "none"}));
    meet(F("--master-addr", AT(master_addr), "address of the node running rank 0").also_named({"--master_addr"}));
    meet(F("--master-port", AT(master_port), "port of the job's store (0: a free port, single node only)")
                  .also_named({"--master_port"}).in(0, 65535));
    meet(F("--standalone", AT(standalone), "a job on this node alone, on a free port (torchrun's --standalone)"));
    meet(F("--rdzv-backend", AT(rdzv_backend), "both meet at the rendezvous endpoint (or --master-addr/--master-port) "
                                                    "through weft's own store")
                  .also_named({"--rdzv_backend"}).one_of({"c10d", "static"}));
    meet(F("--rdzv-endpoint", AT(rdzv_endpoint), "HOST[:PORT] of the rendezvous (port 29400 if left out)")
                  .also_named({"--rdzv_endpoint"}));
    meet(F("--rdzv-id", AT(run_id), "the job's id (TORCHELASTIC_RUN_ID; the log folder's name)")
                  .also_named({"--rdzv_id"}));
    meet(F("--rdzv-conf", AT(rdzv_conf), "last_call_timeout=SECONDS (as --join-timeout)").also_named({"--rdzv_conf"}));
    out(F("--role", AT(role), "ROLE_NAME of the ranks"));
    out(F("--log-dir", AT(log_dir), "folder for --redirects and --tee").also_named({"--log_dir"})
                 .defaults("a new temporary one"));
    out(F("--redirects", AT(redirects_text), "send ranks' output only to files: 1 stdout, 2 stderr, 3 both, or 0:3,1:2")
                 .also_named({"-r"}));
    out(F("--tee", AT(tee_text), "send ranks' output to files and the console: 1, 2, 3, or LOCAL_RANK:CODE,...")
                 .also_named({"-t"}));
    job(F("--stop-status", AT(stop_status), "the exit status after SIGINT or SIGTERM: signal, 128 + the signal (torchrun's); "
                                             "ranks, the ranks' own once they stop (0 when each stops cleanly)")
            .one_of({"signal", "ranks"}));
    out(F("--no-prefix", AT(no_prefix), "print ranks' lines without \"[rank] \" (a job of one rank never has it)"));
    out(F("--no-python", AT(no_python), "run a .py command as it is, not with python3").also_named({"--no_python"}));
    out(F("--module", AT(module), "run the command as a Python module (python3 -m)").also_named({"-m"}));
    return t;
  }();
#undef AT
  return table;
}

}  // namespace

FlagDocs launch_flag_docs() { return flag_docs(launch_flags()); }

void add_launch_command(CLI::App& app, Action& action) {
  auto f = std::make_shared<LaunchFlags>();
  CLI::App* cmd = app.add_subcommand("launch", "start the ranks of a job on this node (torchrun's flags and environment)");
  add_flags(cmd, launch_flags(), *f);
  cmd->add_option("command", f->command, "the command each rank runs (after --, or its first word not an option)");
  cmd->footer("The command follows the options (after --, or from the first word that is not an option); "
              "a command ending in .py runs with python3, as under torchrun.");
  cmd->callback([f, cmd, &action] {
    action = [f, cmd] {
      if (f->nproc_text.find(':') != std::string::npos) {  // a live job's MIN:MAX
        const auto range = parse_integer_pair(f->nproc_text);
        if (!range || range->first < 0 || range->second < 1 || range->first > range->second || range->second > 4096)
          throw ConfigError("--nproc-per-node '" + f->nproc_text + "' is not N or MIN:MAX (0 <= MIN <= MAX, MAX >= 1)");
        f->nproc_per_node = static_cast<int>(range->first);
        f->max_nproc = static_cast<int>(range->second);
      } else {
        f->nproc_per_node = parse_nproc(f->nproc_text);
      }
      parse_nnodes(f->nnodes_text, *f);
      if (!f->rdzv_endpoint.empty()) {
        if (cmd->count("--master-addr") + cmd->count("--master-port") > 0)
          throw ConfigError("give --rdzv-endpoint or --master-addr/--master-port, not both");
        parse_endpoint(f->rdzv_endpoint, *f);
      }
      if (!f->rdzv_conf.empty()) {
        const std::string key = "last_call_timeout=";
        const auto v = f->rdzv_conf.rfind(key, 0) == 0 ? parse_number(f->rdzv_conf.substr(key.size())) : std::nullopt;
        if (!v || f->rdzv_conf.find(',') != std::string::npos)
          throw ConfigError("--rdzv-conf '" + f->rdzv_conf + "': weft knows last_call_timeout=SECONDS");
        f->join_timeout_s = *v;
      }
      if ((cmd->count("--join-timeout") > 0 || !f->rdzv_conf.empty()) && (f->min_nodes == 0 || f->min_nodes == f->nnodes))
        throw ConfigError(std::string(cmd->count("--join-timeout") > 0 ? "--join-timeout" : "--rdzv-conf last_call_timeout") +
                          " waits for nodes beyond the fewest a job goes on with: it needs --nnodes MIN:MAX (MIN < MAX)");
      if (f->standalone) {
        if (f->nnodes != 1 || f->min_nodes > 1) throw ConfigError("--standalone runs one node: leave out --nnodes");
        if (!f->rdzv_endpoint.empty()) throw ConfigError("--standalone picks its own endpoint: leave out --rdzv-endpoint");
        if (cmd->count("--master-addr") + cmd->count("--master-port") > 0)
          throw ConfigError("--standalone picks its own endpoint: leave out --master-addr and --master-port");
        f->master_addr = "127.0.0.1";
        f->master_port = 0;
        if (cmd->count("--rdzv-id") == 0) f->run_id = comm::generate_token().substr(0, 12);
      }
      if (!f->redirects_text.empty()) f->redirects = parse_streams(f->redirects_text, f->nproc_per_node, "--redirects");
      if (!f->tee_text.empty()) f->tee = parse_streams(f->tee_text, f->nproc_per_node, "--tee");
      if (cmd->count("--log-dir") > 0) {
        if (!comm::writes_rank_logs(*f))
          throw ConfigError("--log-dir holds the files --redirects and --tee write: give one of them (a stream code other than 0)");
        check_output_folder(f->log_dir, "--log-dir");  // before a rank starts
      }
      f->prefix = !f->no_prefix;
      if (f->no_python) {
        if (f->module) throw ConfigError("--module runs python3 -m: it cannot go with --no-python");
        f->python.clear();
      }
      return comm::launch(*f);
    };
  });
}

std::vector<std::string> with_launch_separator(CLI::App& app, std::vector<std::string> args) {
  if (args.empty() || args[0] != "launch") return args;
  const CLI::App* launch = app.get_subcommand("launch");
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") break;
    if (a.size() > 1 && a[0] == '-') {
      const std::string name = a.substr(0, a.find('='));
      const CLI::Option* opt = launch->get_option_no_throw(name);
      if (!opt) throw CLI::ExtrasError({name});
      // An option's value is the next word, unless given as --name=value.
      if (opt->get_items_expected_min() > 0 && name.size() == a.size()) ++i;
      continue;
    }
    args.insert(args.begin() + static_cast<std::ptrdiff_t>(i), "--");
    break;
  }
  return args;
}

// weft comm-bench's flags: nccl-tests' (their short names and spellings too) and weft's own;
// sizes as text in weft's size syntax.
struct BenchFlags : comm::BenchConfig {
  std::string min = "8", max = "64M", step = "0", late;
  int check_level = 1, gpus = 1, threads = 1;  // -c; -g, -t: nccl-tests' GPUs and threads per process
  bool list = false;
};

const FlagTable<BenchFlags>& bench_flags() {
  using F = Flag<BenchFlags>;
#define AT(member) [](BenchFlags& o) -> FieldRef { return &o.member; }
  static const FlagTable<BenchFlags> table = [] {
    FlagTable<BenchFlags> t;
    const FlagGroup<BenchFlags> what{t, "what is measured"}, sizes{t, "sizes and repeats"}, out{t, "output"};
    what(F("--op", AT(op), "allreduce broadcast reduce gather scatter allgather reduce_scatter alltoall barrier sendrecv "
                           "(nccl-tests' names too: all_reduce, all_gather, ...)"));
    what(F("--algo", AT(algorithm), "the algorithm (--list)").defaults("the selection table's choice per size"));
    what(F("--transport", AT(transport), "auto | shm | tcp | mpi").defaults("WEFT_TRANSPORT or auto"));
    what(F("--dtype", AT(dtype), "float half bfloat16 double int32 int64 (or f32 f16 bf16 f64 i32 i64), or all")
             .also_named({"-d", "--datatype"}));
    what(F("--reduce", AT(reduce), "sum | prod | max | min | avg, or all").also_named({"-o"}));
    what(F("--root", AT(root), "root rank of broadcast, reduce, gather and scatter").also_named({"-r"}).at_least(0));
    what(F("--late", AT(late), "RANK:US: that rank starts every repeat US microseconds after the others (a straggler; the "
                               "others' times include the wait)"));
    sizes(F("--min", AT(min), "smallest size in bytes (8, 64K = 65536, 1MB = 10^6, 1MiB = 2^20)")
              .also_named({"-b", "--minbytes"}));
    sizes(F("--max", AT(max), "largest size in bytes").also_named({"-e", "--maxbytes"}));
    sizes(F("--stepfactor", AT(step_factor), "multiply the size by this from one row to the next").also_named({"-f"})
              .at_least(1));
    sizes(F("--stepbytes", AT(step), "with -f 1: add this many bytes from one row to the next").also_named({"-i"}));
    sizes(F("--iters", AT(iters), "timed repeats per size").also_named({"-n"}).at_least(1));
    sizes(F("--warmup", AT(warmup), "untimed repeats per size").also_named({"-w", "--warmup_iters"}).at_least(0));
    sizes(F("--check", AT(check_level), "1: check every result (#wrong); 0: do not").also_named({"-c"}).in(0, 1));
    sizes(F("--average", AT(average), "time over the ranks: 0 rank 0, 1 mean, 2 min, 3 max (the slowest)")
              .also_named({"-a"}).in(0, 3));
    sizes(F("--ngpus", AT(gpus), "nccl-tests' GPUs per process: weft runs one rank per process (1 only)")
              .also_named({"-g"}));
    sizes(F("--nthreads", AT(threads), "nccl-tests' threads per process: one rank per process (1 only)")
              .also_named({"-t"}));
    out(F("--json", AT(json), "print one JSON object per size"));
    out(F("--list", AT(list), "list the collectives and their algorithms"));
    return t;
  }();
#undef AT
  return table;
}

FlagDocs comm_bench_flag_docs() { return flag_docs(bench_flags()); }

void add_comm_bench_command(CLI::App& app, Action& action) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* cmd = app.add_subcommand("comm-bench", "measure a collective, nccl-tests style (run under weft launch)");
  add_flags(cmd, bench_flags(), *f);
  cmd->callback([f, &action] {
    action = [f] {
      if (f->list) {
        comm::print_collectives();
        return 0;
      }
      f->min_bytes = parse_size(f->min, "--min");
      f->max_bytes = parse_size(f->max, "--max");
      f->step_bytes = parse_size(f->step, "-i");
      f->check = f->check_level == 1;
      if (!f->late.empty()) {
        const auto parts = parse_number_list(f->late, ':', 2);
        if (!parts || parts->size() != 2 || (*parts)[0] < 0 || (*parts)[0] != std::floor((*parts)[0]) ||
            (*parts)[0] > 1e6 || (*parts)[1] < 0 || (*parts)[1] > 1e7 || (*parts)[1] != std::floor((*parts)[1]))
          throw ConfigError("--late '" + f->late + "' is not RANK:MICROSECONDS (whole numbers, at most 10000000 us)");
        f->late_rank = static_cast<int>((*parts)[0]);
        f->late_us = static_cast<std::int64_t>((*parts)[1]);
      }
      if (f->gpus != 1 || f->threads != 1)
        throw ConfigError(fmt::format("-g {} -t {}: each weft rank is one process with one device and one thread "
                                      "(start more ranks with weft launch --nproc-per-node)", f->gpus, f->threads));
      return comm::run_comm_bench(*f);
    };
  });
}

}  // namespace weft::cli
