// weft launch: starts the local ranks of a job, torchrun-style.
//
// Sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
// MASTER_PORT, WEFT_JOB_TOKEN (generated when absent on a single node),
// WEFT_NUM_THREADS (the cores divided among local ranks, unless set) and
// WEFT_RESTART_COUNT (0, then 1, 2, ... after restarts); binds each local rank to its share
// of the launcher's cores (--bind cores, the default; --bind none leaves them free); prefixes each line a
// rank prints with "[rank] "; forwards SIGINT and SIGTERM; when a worker fails, stops the
// others and either restarts all of them (--max-restarts) or returns the first failing
// exit code (128 + signal for a signal).
//
// Elastic membership (--nnodes MIN:MAX): the launchers agree on the nodes of each attempt
// through a store kept by node 0's launcher at MASTER_ADDR:MASTER_PORT. An attempt starts
// when MAX nodes joined, or MIN did and nobody else joined for --join-timeout seconds; the
// joined nodes get ranks in the order of their --node-rank. When a node is lost, its
// peers' workers fail, their launchers restart and meet again without it: the job goes on
// with fewer nodes (down to MIN), resuming from its latest checkpoint on the smaller world.
#pragma once

#include <string>
#include <vector>

namespace weft::comm {

struct LaunchConfig {
  int nproc_per_node = 1;
  int nnodes = 1;
  int min_nodes = 0;       // elastic: fewest nodes to go on with (0: exactly nnodes)
  double join_timeout_s = 10;  // elastic: how long an attempt waits for more than min_nodes
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: a free port on a single node, 29500 across nodes
  int max_restarts = 0;
  std::string bind = "cores";  // cores: each local rank on its share of the cores; none
  double grace_s = 5.0;  // between SIGTERM and SIGKILL when stopping workers
  std::vector<std::string> command;
};

// Validates (throws ConfigError), runs, and returns the exit code for the launcher.
int launch(const LaunchConfig& config);

}  // namespace weft::comm
