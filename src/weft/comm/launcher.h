// weft launch: starts the local ranks of a job, torchrun-style.
//
// Sets what torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
// GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME, MASTER_ADDR, MASTER_PORT,
// TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID,
// TORCHELASTIC_USE_AGENT_STORE=False, OMP_NUM_THREADS unless set) and weft's own
// (WEFT_JOB_TOKEN, generated when absent on a single node; WEFT_NUM_THREADS, the cores
// divided among local ranks unless set; WEFT_RESTART_COUNT; PYTHONPATH gains the folder of
// the weft_torch package, whose sitecustomize registers the torch.distributed backend
// "weft" when a rank imports torch.distributed); runs a command ending in .py
// with python3 (as torchrun does; --no-python runs it as it is, --module runs python3 -m);
// binds each local rank to its share of the launcher's cores (--bind cores, the default;
// --bind none leaves them free); prefixes each line a rank prints with "[rank] " when the
// job has several ranks (prefix off: none); sends a rank's output to files under
// log_dir/RUN_ID_XXXXXX/attempt_N/LOCAL_RANK/{stdout,stderr}.log (a new folder for each
// launch, named on stderr, as torchrun makes it) instead of (redirects) or as well
// as (tee) the console; forwards SIGINT and SIGTERM (and a launcher that dies, even by
// SIGKILL, sends its workers SIGTERM: none outlives it); when a worker fails, stops the others
// and either restarts all of them (--max-restarts) or returns the first failing exit code
// (128 + signal for a signal).
//
// Elastic membership (--nnodes MIN:MAX): the launchers agree on the nodes of each attempt
// through a store kept by node 0's launcher at MASTER_ADDR:MASTER_PORT. An attempt starts
// when MAX nodes joined, or MIN did and nobody else joined for --join-timeout seconds; the
// joined nodes get ranks in the order of their --node-rank. When a node is lost, its
// peers' workers fail, their launchers restart and meet again without it: the job goes on
// with fewer nodes (down to MIN), resuming from its latest checkpoint on the smaller world.
//
// Live membership (--elastic; membership.h): the launcher keeps a store for the job's whole
// life at MASTER_ADDR:MASTER_PORT (a free port when 0, printed) and gives its address to the
// workers (WEFT_ELASTIC_STORE); a launcher started later with --join HOST:PORT, on this node
// or another, adds its workers to the running job (WEFT_ELASTIC_JOIN=1), and a worker that
// gets SIGTERM or SIGINT leaves it, without a restart. Both need WEFT_JOB_TOKEN exported.
// With --nproc-per-node MIN:MAX a launcher starts MIN ranks and keeps MAX - MIN places the
// job may ask for (weft train --grow-at, or its noise-scale policy): it starts a rank that
// joins for each request it claims (live/requested, live/spawned in the store), while it
// runs fewer than MAX; ranks are bound to cores and given threads for MAX of them.
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
  bool prefix = true;    // "[rank] " before each line (only ever for a job of several ranks)
  // The launcher's exit status after SIGINT or SIGTERM: "signal", 128 + the signal (torchrun's);
  // "ranks", the ranks' own once they end (0 when every rank stops cleanly, as a server does).
  std::string stop_status = "signal";
  std::string run_id = "none";  // TORCHELASTIC_RUN_ID (torchrun's --rdzv-id)
  std::string role = "default";  // ROLE_NAME
  std::string log_dir;          // where redirected or teed output goes
  // Per local rank, which streams go to files (1 stdout, 2 stderr, 3 both): `redirects`
  // only to the file, `tee` to the file and the console. Empty: none.
  std::vector<int> redirects, tee;
  std::string python = "python3";  // runs a command that is a .py script ("": run as it is)
  bool module = false;             // run the command as python3 -m MODULE
  std::vector<std::string> command;
  bool elastic = false;   // keep a live membership store (membership.h)
  std::string join;       // HOST:PORT of a live job's store: add this launcher's workers to it
  std::string live_store; // (set by launch) what the workers get as WEFT_ELASTIC_STORE
  int max_nproc = 0;      // live: local ranks the job may grow to (MIN:MAX; 0: nproc_per_node)
};

// Validates (throws ConfigError), runs, and returns the exit code for the launcher.
int launch(const LaunchConfig& config);
// True when some local rank sends a stream to files (--redirects or --tee), under log_dir.
bool writes_rank_logs(const LaunchConfig& config);

}  // namespace weft::comm
