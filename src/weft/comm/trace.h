// Traces of communication (WEFT_TRACE=DIR): each rank appends one JSON line per
// operation to DIR/rank-<global rank>.jsonl. The format (docs/trace-format.md) is what the
// simulator replays and what the planner emits.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "weft/comm/executor.h"

namespace weft::comm {

struct TraceRecord {
  std::string op;         // allreduce, broadcast, ..., send, recv
  std::string algorithm;  // empty for point to point
  std::string group;      // group name
  std::vector<int> group_ranks;  // global ranks of the group
  int rank = 0;           // global rank of the writer
  std::string dtype;
  std::string reduce;     // reduction op, when there is one
  std::int64_t count = 0;  // elements per rank
  std::int64_t bytes = 0;  // count * element size
  int root = -1;
  std::vector<int> peers;  // point to point: the peer (global)
  std::int64_t start_us = 0, end_us = 0;  // microseconds since the Unix epoch
  StepSends steps;         // per step: (global peer, bytes) of each send
};

// The group an operation ran in, as its records name it.
struct TraceGroup {
  std::string name;
  std::vector<int> ranks;  // global
  int rank = 0;            // global rank of the writer
};

// The record of a collective of `count` elements per rank (root: a group rank), with the
// reduction and the root where the collective has them (algo/collective_facts.h).
TraceRecord collective_record(algo::Collective c, const std::string& algorithm, const TraceGroup& group, DataType type,
                              ReduceOp op, std::int64_t count, int root);
// The record of a send or receive of `count` elements to or from group rank `peer`.
TraceRecord point_to_point_record(bool send, const TraceGroup& group, DataType type, std::int64_t count, int peer);

// Refuses (ConfigError, one line naming them) a trace folder that already holds rank files
// past a job of `world` ranks: another run's, which a replay of the folder would mix with
// this one's (each rank replaces its own file only). Every rank checks as it starts, before
// it replaces its own file, so a refused job leaves the folder as it was. A restarted
// attempt (WEFT_RESTART_COUNT of weft launch or TORCHELASTIC_RESTART_COUNT of torchrun
// above 0) is not checked: the files past its ranks are its own earlier attempt's
// (docs/trace-format.md).
void check_trace_folder(const std::string& dir, int world);

class Tracer {
 public:
  Tracer(const std::string& dir, int global_rank);
  void write(const TraceRecord& r);
  // A point in this rank's time with no traffic ({"op": "mark", "name": ...}): where an
  // iteration starts, so that a replay keeps the compute before its first operation.
  void mark(const std::string& name, int global_rank);

 private:
  void append(const std::string& line);  // one record, whole, under the lock
  std::mutex mu_;
  std::string path_;
};

std::int64_t now_us();

}  // namespace weft::comm
