// weft comm-bench: the nccl-tests table for weft's collectives. Run under weft launch (or
// mpirun, or Slurm); rank 0 prints one row per size: bytes, count, type, algorithm, time
// (median over the repeats of the slowest rank, microseconds), algbw and busbw (GB/s, as
// nccl-tests defines them), and #wrong: elements that differ from the expected result.
#pragma once

#include <cstdint>
#include <string>

namespace weft::comm {

struct BenchConfig {
  std::string op = "allreduce";
  std::string algorithm;      // empty: the selection table's choice per size
  std::string transport = "";  // empty: WEFT_TRANSPORT or auto
  std::string dtype = "f32";
  std::string reduce = "sum";
  std::int64_t min_bytes = 8;
  std::int64_t max_bytes = 64 << 20;
  int iters = 20;
  int warmup = 3;
  bool json = false;  // one JSON object per row instead of the table
};

// Runs the benchmark (every rank of a job); sizes in bytes (util/size.h parses them).
int run_comm_bench(const BenchConfig& config);

}  // namespace weft::comm
