// What the simulated GPUs do: per agent (one rank of one job, placed on one GPU) a list
// of steps. A step waits `gap` (compute), then posts its sends (RDMA writes) and waits
// for them to be acknowledged and for its expected receives to arrive. Messages between
// two agents match in order, exactly as in the schedule IR (algo/program.h).
//
// Workloads come from: a collective expanded through the `algo` schedules (the code the
// real communicator runs), a trace folder written by a real run (WEFT_TRACE), synthetic
// patterns (permutation, incast, all-to-all, single flows), or a job file combining
// several of them with failures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/algo/protocol.h"
#include "weft/sim/engine.h"
#include "weft/sim/topology.h"

namespace weft::sim {

struct Transfer {
  int peer = -1;  // agent index
  std::int64_t bytes = 0;
};

struct WorkStep {
  Time gap = 0;
  std::vector<Transfer> sends, recvs;
  int collective = -1;  // index into Workload::collectives, or -1
};

struct Agent {
  int job = 0;
  int rank = 0;
  int gpu = 0;  // GPU rank in the topology (index into Topology::gpus)
  int queue = -1;  // traffic class (priority queue) of its writes; -1: the RoCE class
  int stream = 0;  // a trace's stream: operations of one rank that run beside its others
  int channel = 0;  // a collective's channel (algo::Op::channel), run beside the others
  bool relay = false;  // a PXN relay (pxn.h): forwards another rank's messages
  Time start = 0;
  std::vector<WorkStep> steps;
};

struct CollectiveInfo {
  std::string name;       // e.g. "allreduce/ring", or "allreduce/tree/ll128" with a protocol
  int job = 0;
  int ranks = 0;
  std::int64_t bytes = 0;  // per rank (nccl-tests "size")
  double busbw_factor = 1;
  // With a GPU protocol (algo/protocol.h): the launch, spent before a rank's first step and
  // counted in the collective's time, and the delay from a message's last byte landing to
  // the receiving GPU seeing its flag. Both 0 without one.
  Time launch = 0, ready = 0;
  double predicted_us = 0;  // algorithm "auto": the cost model's time for its choice
};

struct Failure {
  // kPauseStorm: node a keeps pausing its link to b (a stuck receiver), which the PFC
  // watchdog of b's port is there to detect and break.
  enum class Kind : std::uint8_t { kLinkDown, kLinkUp, kLinkDegrade, kSwitchDown, kSwitchUp, kPauseStorm };
  Time at = 0;
  Kind kind = Kind::kLinkDown;
  std::string a, b;  // link ends (node names), or the switch in a
  double bps = 0;    // degrade: the new speed
};

struct Workload {
  int channels_per_nic = 1;  // rings per rail of rail_rings collectives (SimConfig::channels_per_nic)
  std::vector<std::string> jobs;
  std::vector<Agent> agents;
  std::vector<CollectiveInfo> collectives;
  std::vector<Failure> failures;
};

// "rank R", or "job J rank R" when the workload has several jobs.
std::string agent_name(const Workload& w, int agent);

// Parses a workload argument: a trace folder, a job file (.yaml/.yml), or a spec such as
//   allreduce:ring:64MB[@0-15]   broadcast:binomial:1MB@0-7   permutation:2MB
//   incast:8:16MB (GPUs 1..8 -> GPU 0)   alltoall:1MB@0-7   flow:0:5:1MB
// Collectives built here run `channels_per_nic` rings per rail where the algorithm is
// rail_rings (NCCL's channels per NIC; algo::Options::channels_per_rail).
// Throws ConfigError with a one-line explanation.
Workload load_workload(const std::string& spec, const Topology& topology, std::uint64_t seed, int channels_per_nic = 1);

// A collective over `gpus` (topology GPU ranks), expanded through algo::build_program.
// `algorithm` is a registry name (the message-level model: no GPU protocol costs), NAME/PROTOCOL
// (ll, ll128, simple: their wire bytes, launch and flag latencies), or "auto": the algorithm and
// protocol the cost model (algo/protocol.h) picks for these GPUs' NICs, NVLink and hosts.
void add_collective(Workload& w, const std::string& collective, const std::string& algorithm, std::int64_t bytes,
                    const std::vector<int>& gpus, const Topology& topology, Time start, int iterations = 1);
// The cost model's inputs for a collective over `gpus`: ranks, hosts, one GPU's NIC and
// NVLink speed (the slowest among them).
algo::CostInputs cost_inputs(const Topology& topology, const std::vector<int>& gpus);

}  // namespace weft::sim
