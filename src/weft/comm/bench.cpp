#include "weft/comm/bench.h"

#include "weft/util/size.h"

#include "weft/algo/collective_facts.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "weft/algo/program.h"
#include "weft/comm/communicator.h"
#include "weft/comm/mpi_transport.h"
#include "weft/comm/process.h"

namespace weft::comm {

using algo::Collective;

namespace {

// Small integers, exact in every type, so results can be checked exactly.
double input_value(int rank, std::int64_t i, ReduceOp op) {
  if (op == ReduceOp::kProd) return 1.0 + static_cast<double>((rank + i) % 2);
  return static_cast<double>((rank + 1) * 3 + i % 7);
}

double reduced_value(int world, std::int64_t i, ReduceOp op, bool integer) {
  double acc = input_value(0, i, op);
  for (int r = 1; r < world; ++r) {
    double v = input_value(r, i, op);
    switch (op) {
      case ReduceOp::kSum: case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
    }
  }
  if (op == ReduceOp::kAvg) acc = integer ? std::trunc(acc / world) : acc / world;
  return acc;
}

struct Typed {
  DataType t;
  std::vector<std::uint8_t> bytes;
  // Keeps the memory when the size is unchanged: a fresh buffer's first touch (page
  // faults) must not land in the timed region.
  void resize(std::int64_t n) { bytes.resize(static_cast<std::size_t>(n) * element_size(t)); }
  void set(std::int64_t i, double v) {
    switch (t) {
      case DataType::kF32: reinterpret_cast<float*>(bytes.data())[i] = static_cast<float>(v); break;
      case DataType::kF64: reinterpret_cast<double*>(bytes.data())[i] = v; break;
      case DataType::kI32: reinterpret_cast<std::int32_t*>(bytes.data())[i] = static_cast<std::int32_t>(v); break;
      case DataType::kI64: reinterpret_cast<std::int64_t*>(bytes.data())[i] = static_cast<std::int64_t>(v); break;
    }
  }
  double get(std::int64_t i) const {
    switch (t) {
      case DataType::kF32: return reinterpret_cast<const float*>(bytes.data())[i];
      case DataType::kF64: return reinterpret_cast<const double*>(bytes.data())[i];
      case DataType::kI32: return reinterpret_cast<const std::int32_t*>(bytes.data())[i];
      case DataType::kI64: return static_cast<double>(reinterpret_cast<const std::int64_t*>(bytes.data())[i]);
    }
    return 0;
  }
  void* data() { return bytes.data(); }
};

}  // namespace

int run_comm_bench(const BenchConfig& cfg) {
  const Collective coll = algo::parse_collective(cfg.op);
  const DataType dt = parse_dtype(cfg.dtype);
  const ReduceOp rop = parse_op(cfg.reduce);
  if (cfg.min_bytes < 0 || cfg.max_bytes < cfg.min_bytes) throw ConfigError("--min must be <= --max");
  if (cfg.max_bytes > (std::int64_t{1} << 40)) throw ConfigError("--max: at most 1T (2^40 bytes) per buffer");
  if (cfg.iters < 1 || cfg.warmup < 0) throw ConfigError("--iters must be >= 1 and --warmup >= 0");
  CommOptions opts = CommOptions::from_env();
  if (!cfg.transport.empty()) {
    if (cfg.transport == "mpi" && !mpi::built_with_mpi()) {
      throw ConfigError("--transport mpi: this weft was built without MPI");
    }
    if (cfg.transport != "shm" && cfg.transport != "tcp" && cfg.transport != "auto" && cfg.transport != "mpi") {
      throw ConfigError("--transport '" + cfg.transport + "' is not one of auto, shm, tcp, mpi");
    }
    opts.transport = cfg.transport;
  }
  auto comm = Communicator::init(process_info_from_env(), opts);
  const int w = comm->size(), r = comm->rank();
  const std::size_t es = element_size(dt);
  const bool integer = dt == DataType::kI32 || dt == DataType::kI64;
  const bool total_sized = algo::data_elements(coll, 1, 2) == 2;  // a block per rank
  if (r == 0 && !cfg.json) {
    std::printf("# weft comm-bench: %s, %d ranks, transport %s, %d iterations (median of the slowest rank)\n",
                cfg.op.c_str(), w, comm->transport().c_str(), cfg.iters);
    std::printf("%12s %12s %5s %20s %12s %10s %10s %8s\n", "size(B)", "count", "type", "algorithm", "time(us)",
                "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  }
  std::int64_t total_wrong = 0;
  std::int64_t start = std::max<std::int64_t>(cfg.min_bytes, static_cast<std::int64_t>(es));
  for (std::int64_t bytes = start; bytes <= cfg.max_bytes; bytes *= 2) {
    if (coll == Collective::kBarrier && bytes > start) break;
    std::int64_t count = total_sized ? bytes / (static_cast<std::int64_t>(es) * w) : bytes / static_cast<std::int64_t>(es);
    if (coll == Collective::kBarrier) count = 0;
    if (count == 0 && coll != Collective::kBarrier) continue;
    const std::int64_t total = count * w;
    Typed in{dt, {}}, out{dt, {}};
    auto fill = [&] {
      switch (coll) {
        case Collective::kAllReduce: case Collective::kReduce: case Collective::kBroadcast:
          in.resize(count);
          out.resize(count);
          for (std::int64_t i = 0; i < count; ++i) in.set(i, input_value(r, i, rop));
          if (coll == Collective::kBroadcast) std::memcpy(out.data(), in.data(), in.bytes.size());
          break;
        case Collective::kGather: case Collective::kAllGather:
          in.resize(count);
          out.resize(total);
          for (std::int64_t i = 0; i < count; ++i) in.set(i, input_value(r, r * count + i, rop));
          break;
        case Collective::kScatter: case Collective::kReduceScatter: case Collective::kAllToAll:
          in.resize(total);
          out.resize(coll == Collective::kAllToAll ? total : count);
          for (std::int64_t i = 0; i < total; ++i) in.set(i, input_value(r, i, rop));
          break;
        case Collective::kBarrier: break;
      }
    };
    std::string algorithm = cfg.algorithm.empty() ? comm->choose_algorithm(coll, count * static_cast<std::int64_t>(es))
                                                  : cfg.algorithm;
    auto once = [&] {
      switch (coll) {
        case Collective::kAllReduce: comm->allreduce(in.data(), out.data(), count, dt, rop, algorithm)->wait(); break;
        case Collective::kBroadcast: comm->broadcast(out.data(), count, dt, 0, algorithm)->wait(); break;
        case Collective::kReduce: comm->reduce(in.data(), out.data(), count, dt, rop, 0, algorithm)->wait(); break;
        case Collective::kGather: comm->gather(in.data(), out.data(), count, dt, 0, algorithm)->wait(); break;
        case Collective::kScatter: comm->scatter(in.data(), out.data(), count, dt, 0, algorithm)->wait(); break;
        case Collective::kAllGather: comm->allgather(in.data(), out.data(), count, dt, algorithm)->wait(); break;
        case Collective::kReduceScatter:
          comm->reduce_scatter(in.data(), out.data(), count, dt, rop, algorithm)->wait();
          break;
        case Collective::kAllToAll: comm->alltoall(in.data(), out.data(), count, dt, algorithm)->wait(); break;
        case Collective::kBarrier: comm->barrier()->wait(); break;
      }
    };
    // The inputs are filled once: no collective changes its input, and a broadcast leaves the
    // root's buffer as it was. (Refilling between iterations would run into the timed part
    // of ranks that finish later, when ranks share cores.)
    fill();
    std::vector<double> times;
    for (int it = 0; it < cfg.warmup + cfg.iters; ++it) {
      comm->barrier()->wait();
      auto t0 = std::chrono::steady_clock::now();
      once();
      double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      if (it >= cfg.warmup) times.push_back(us);
    }
    std::sort(times.begin(), times.end());
    double median = times[times.size() / 2];
    // Check the last result.
    std::int64_t wrong = 0;
    auto expect = [&](std::int64_t at, double want) { wrong += out.get(at) != want; };
    switch (coll) {
      case Collective::kAllReduce:
        for (std::int64_t i = 0; i < count; ++i) expect(i, reduced_value(w, i, rop, integer));
        break;
      case Collective::kReduce:
        if (r == 0)
          for (std::int64_t i = 0; i < count; ++i) expect(i, reduced_value(w, i, rop, integer));
        break;
      case Collective::kBroadcast:
        for (std::int64_t i = 0; i < count; ++i) expect(i, input_value(0, i, rop));
        break;
      case Collective::kGather: case Collective::kAllGather:
        if (coll == Collective::kAllGather || r == 0)
          for (std::int64_t i = 0; i < total; ++i) expect(i, input_value(static_cast<int>(i / count), i, rop));
        break;
      case Collective::kScatter:
        for (std::int64_t i = 0; i < count; ++i) expect(i, input_value(0, r * count + i, rop));
        break;
      case Collective::kReduceScatter:
        for (std::int64_t i = 0; i < count; ++i) expect(i, reduced_value(w, r * count + i, rop, integer));
        break;
      case Collective::kAllToAll:
        for (std::int64_t b = 0; b < w; ++b)
          for (std::int64_t j = 0; j < count; ++j) expect(b * count + j, input_value(static_cast<int>(b), r * count + j, rop));
        break;
      case Collective::kBarrier: break;
    }
    double slowest = median;
    comm->allreduce(&slowest, 1, DataType::kF64, ReduceOp::kMax, "recursive_doubling")->wait();
    comm->allreduce(&wrong, 1, DataType::kI64, ReduceOp::kSum, "recursive_doubling")->wait();
    double algbw = slowest > 0 ? static_cast<double>(bytes) / (slowest * 1e3) : 0.0;
    double busbw = algbw * algo::busbw_factor(coll, w);
    std::int64_t shown = coll == Collective::kBarrier ? 0 : (total_sized ? total : count) * static_cast<std::int64_t>(es);
    if (r == 0) {
      if (cfg.json) {
        std::printf("{\"op\":\"%s\",\"ranks\":%d,\"transport\":\"%s\",\"bytes\":%lld,\"count\":%lld,\"dtype\":\"%s\","
                    "\"algorithm\":\"%s\",\"time_us\":%.2f,\"algbw_gbps\":%.4f,\"busbw_gbps\":%.4f,\"wrong\":%lld}\n",
                    cfg.op.c_str(), w, comm->transport().c_str(), static_cast<long long>(shown),
                    static_cast<long long>(count), cfg.dtype.c_str(), algorithm.c_str(), slowest, algbw, busbw,
                    static_cast<long long>(wrong));
      } else {
        std::printf("%12lld %12lld %5s %20s %12.1f %10.3f %10.3f %8lld\n", static_cast<long long>(shown),
                    static_cast<long long>(count), cfg.dtype.c_str(), algorithm.c_str(), slowest, algbw, busbw,
                    static_cast<long long>(wrong));
      }
      std::fflush(stdout);
    }
    total_wrong += wrong;
    if (wrong > 0 && r == 0) std::fprintf(stderr, "comm-bench: %lld wrong elements at %lld bytes\n",
                                          static_cast<long long>(wrong), static_cast<long long>(bytes));
  }
  comm->barrier()->wait();
  return total_wrong == 0 ? 0 : 1;
}

}  // namespace weft::comm
