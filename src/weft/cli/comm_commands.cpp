#include <memory>

#include "weft/cli/commands.h"
#include "weft/comm/bench.h"
#include "weft/comm/launcher.h"
#include "weft/util/error.h"
#include "weft/util/size.h"

namespace weft::cli {

void add_launch_command(CLI::App& app, Action& action) {
  auto c = std::make_shared<comm::LaunchConfig>();
  CLI::App* cmd = app.add_subcommand("launch", "start the ranks of a job on this node (torchrun-compatible)");
  cmd->add_option("--nproc-per-node", c->nproc_per_node, "ranks on this node")->capture_default_str();
  auto nnodes = std::make_shared<std::string>("1");
  cmd->add_option("--nnodes", *nnodes, "nodes in the job, or MIN:MAX to go on with fewer after a node is lost")
      ->capture_default_str();
  cmd->add_option("--join-timeout", c->join_timeout_s,
                  "--nnodes MIN:MAX: seconds an attempt waits for nodes beyond MIN")
      ->capture_default_str();
  cmd->add_option("--node-rank", c->node_rank, "this node's index")->capture_default_str();
  cmd->add_option("--master-addr", c->master_addr, "address of the node running rank 0")->capture_default_str();
  cmd->add_option("--master-port", c->master_port, "port of the job's store (0: a free port, single node only)")
      ->capture_default_str();
  cmd->add_option("--max-restarts", c->max_restarts, "restart all ranks up to K times when one fails")
      ->capture_default_str();
  cmd->add_option("--bind", c->bind, "cores: bind each rank to its share of the cores (ranks beyond the cores "
                                     "share them round-robin); none: leave the ranks free")
      ->capture_default_str();
  cmd->add_option("command", c->command, "the command each rank runs (after --)")->required();
  cmd->callback([c, nnodes, &action] {
    action = [c, nnodes] {
      // "N" or "MIN:MAX".
      auto number = [](const std::string& s) {
        std::size_t used = 0;
        int v = -1;
        try {
          v = std::stoi(s, &used);
        } catch (...) {
          used = 0;
        }
        if (used != s.size() || s.empty()) throw ConfigError("--nnodes: '" + s + "' is not N or MIN:MAX");
        return v;
      };
      auto colon = nnodes->find(':');
      if (colon == std::string::npos) {
        c->nnodes = number(*nnodes);
      } else {
        c->min_nodes = number(nnodes->substr(0, colon));
        c->nnodes = number(nnodes->substr(colon + 1));
        if (c->min_nodes < 1) throw ConfigError("--nnodes MIN:MAX needs MIN >= 1");
      }
      return comm::launch(*c);
    };
  });
}

void add_comm_bench_command(CLI::App& app, Action& action) {
  auto c = std::make_shared<comm::BenchConfig>();
  auto sizes = std::make_shared<std::pair<std::string, std::string>>("8", "64M");
  CLI::App* cmd = app.add_subcommand("comm-bench", "measure a collective (run under weft launch)");
  cmd->add_option("--op", c->op, "allreduce broadcast reduce gather scatter allgather reduce_scatter alltoall barrier")
      ->capture_default_str();
  cmd->add_option("--algo", c->algorithm, "algorithm (default: the selection table's choice per size)");
  cmd->add_option("--transport", c->transport, "auto | shm | tcp (default: WEFT_TRANSPORT or auto)");
  cmd->add_option("--dtype", c->dtype, "f32 | f64 | i32 | i64")->capture_default_str();
  cmd->add_option("--reduce", c->reduce, "sum | avg | max | min | prod")->capture_default_str();
  cmd->add_option("--min", sizes->first, "smallest size in bytes (8, 64K = 65536, 1MB = 10^6, 1MiB = 2^20)")
      ->capture_default_str();
  cmd->add_option("--max", sizes->second, "largest size in bytes, stepping x2")->capture_default_str();
  cmd->add_option("--iters", c->iters, "timed repeats per size")->capture_default_str();
  cmd->add_option("--warmup", c->warmup, "untimed repeats per size")->capture_default_str();
  cmd->add_flag("--json", c->json, "print one JSON object per size");
  cmd->callback([c, sizes, &action] {
    action = [c, sizes] {
      c->min_bytes = parse_size(sizes->first, "--min");
      c->max_bytes = parse_size(sizes->second, "--max");
      return comm::run_comm_bench(*c);
    };
  });
}

}  // namespace weft::cli
