// weft comm-bench: nccl-tests' performance table for weft's collectives, with nccl-tests'
// flags. Run under weft launch (or mpirun, or Slurm); rank 0 prints, per size, the
// out-of-place and the in-place run: time (median over the repeats, combined over the ranks
// as -a says: the slowest by default), algbw and busbw (GB/s, as nccl-tests defines them)
// and #wrong (elements that differ from the expected result), then nccl-tests' footer
// ("# Out of bounds values", "# Avg bus bandwidth"), and in a comment line after it the
// algorithm each size ran (the rows keep nccl-tests' columns exactly). The exit code is 1 when a result was
// wrong, or when NCCL_TESTS_MIN_BW is set and the average bus bandwidth is below 0.9 of it.
#pragma once

#include <cstdint>
#include <string>

namespace weft::comm {

struct BenchConfig {
  // A collective by weft's name or nccl-tests' (all_reduce, all_gather, ...; a trailing
  // "_perf" is dropped), or sendrecv: each rank sends to the next and receives from the
  // previous.
  std::string op = "allreduce";
  std::string algorithm;       // empty: the selection table's choice per size
  std::string transport = "";  // empty: WEFT_TRANSPORT or auto
  std::string dtype = "f32";   // weft's names or nccl-tests' (float, half, bfloat16, ...), or all
  std::string reduce = "sum";  // sum prod max min avg, or all
  std::int64_t min_bytes = 8;
  std::int64_t max_bytes = 64 << 20;
  std::int64_t step_factor = 2;  // the next size is size x factor ...
  std::int64_t step_bytes = 0;   // ... or, when > 0 and the factor is 1, size + step_bytes
  int iters = 20;
  int warmup = 3;
  bool check = true;  // -c 0: results are not checked (#wrong shows N/A)
  int root = 0;       // of broadcast, reduce, gather, scatter
  int average = 3;    // ranks' times combined: 0 rank 0's, 1 the mean, 2 the least, 3 the most
  bool json = false;  // one JSON object per row instead of the table
  // --late RANK:US: that rank starts each repeat this many microseconds after the barrier
  // (a straggler); the others' times include the wait, its own do not.
  int late_rank = -1;
  std::int64_t late_us = 0;
};

// Runs the benchmark (every rank of a job); sizes in bytes (util/size.h parses them).
int run_comm_bench(const BenchConfig& config);

// Prints every collective and its algorithms, the selection table's choice marked.
void print_collectives();

}  // namespace weft::comm
