// The pieces workloads are built from, shared by the readers of each kind of input:
// specs (workload_spec.cpp), trace folders (workload_trace.cpp) and job files
// (workload_job.cpp). Internal to the simulator.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "weft/algo/program.h"
#include "weft/sim/workload.h"

namespace weft::sim {

// Appends one rank's program as steps (only channel `channel`'s operations, when >= 0);
// `agent_of` maps the program's peers to agents (agents_of[c][peer] for channel c when
// channels run apart). With a protocol, each message carries that protocol's wire bytes.
void append_program(Agent& agent, const algo::Program& p, std::int64_t element_bytes,
                    const std::vector<std::vector<int>>& agents_of, int collective, Time gap,
                    std::optional<algo::Protocol> protocol = std::nullopt, int channel = -1);
// Messages of no bytes between agents on one GPU (which cost nothing), to order them: agent
// `first` lets each of `others` go on (after `gap` of compute), or hears that each is done.
void release(Workload& w, int first, const std::vector<int>& others, Time gap = 0);
void gather(Workload& w, int first, const std::vector<int>& others);
// What a collective's algorithm field asks for: ALGORITHM (the message level), ALGORITHM/PROTOCOL,
// or auto (the cost model's choice of both for these GPUs).
struct CollectiveChoice {
  std::string algorithm;
  std::optional<algo::Protocol> protocol;
  double predicted_us = 0;
  Time launch = 0, ready = 0;  // CollectiveInfo's
  std::string name(algo::Collective c) const;  // e.g. "allreduce/tree/ll128"
};
CollectiveChoice choose(algo::Collective c, const std::string& spec, std::int64_t bytes, const Topology& t,
                        const std::vector<int>& gpus);

// The rings per rail of a rail_rings collective of `bytes` (Options::channels_per_rail): the
// workload's channels per NIC, fewer for a small call as NCCL gives up channels
// (algo::channels_for_bytes over every rail's channels; at least one per rail).
int rings_per_rail(const Workload& w, std::int64_t bytes, int local_world, std::optional<algo::Protocol> protocol);

// The agents of one job's ranks, one per channel of their programs: each channel runs beside
// the others on queue pairs of its own, as NCCL runs each channel in a thread block with its
// own connections. of()[c][r] is channel c's agent of rank r; channel 0's are agents
// base..base+ranks-1, the others are made as programs need them (copies of channel 0's).
class ChannelAgents {
 public:
  ChannelAgents(Workload& w, int base, int ranks);
  const std::vector<std::vector<int>>& of() const { return of_; }
  // Agents for channels up to those `p` uses.
  void cover(const algo::Program& p);
  // One kernel per call: a GPU's channels all finish it before the next starts.
  void join();

 private:
  Workload& w_;
  int base_;
  std::vector<std::vector<int>> of_;
};

// A job of one agent per GPU; returns the index of its first agent.
int add_job(Workload& w, const std::string& name, const std::vector<int>& gpus, Time start);
std::vector<int> all_gpus(const Topology& t);
// The fields of `s` between separators (empty fields kept).
std::vector<std::string> split_fields(const std::string& s, char sep);
// "0-15", "0,2,4", "0-3,8-11": GPU ranks of a topology with `gpus` GPUs.
std::vector<int> parse_gpu_list(const std::string& text, int gpus, const std::string& where);
void add_pattern(Workload& w, const std::string& pattern, std::int64_t bytes, std::vector<int> gpus, Time start,
                 std::uint64_t seed, int senders, const std::string& where);
void add_flow(Workload& w, int src, int dst, std::int64_t bytes, Time start, int gpus, const std::string& where);
void add_spec(Workload& w, const std::string& spec, const Topology& t, std::uint64_t seed);
// A trace folder's records as agents on `placement` (empty: GPUs 0..world-1); with `gaps`,
// the recorded time between operations becomes compute gaps.
void add_trace(Workload& w, const std::string& dir, const Topology& t, bool gaps, const std::vector<int>& placement);
// The GPUs of a trace folder's ranks (files by rank, which must be 0..world-1): `placement`,
// or GPUs 0..world-1 when it is empty.
std::vector<int> trace_gpus(const std::map<int, std::string>& files, const std::string& dir, const Topology& t,
                            const std::vector<int>& placement);
// A folder of Chakra execution traces, <name>.<rank>.et (and ASTRA-sim's comm_group.json for
// the process groups), as agents on `placement`; with `gaps`, nodes take their durations.
// False, adding nothing, when the folder has no such files.
bool add_chakra(Workload& w, const std::string& dir, const Topology& t, bool gaps, const std::vector<int>& placement);
void load_job_file(Workload& w, const std::string& path, const Topology& t, std::uint64_t seed);

}  // namespace weft::sim
