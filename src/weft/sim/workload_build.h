// The pieces workloads are built from, shared by the readers of each kind of input:
// specs (workload_spec.cpp), trace folders (workload_trace.cpp) and job files
// (workload_job.cpp). Internal to the simulator.
#pragma once

#include <cstdint>
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
void load_job_file(Workload& w, const std::string& path, const Topology& t, std::uint64_t seed);

}  // namespace weft::sim
