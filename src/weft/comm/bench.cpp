#include "weft/comm/bench.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "weft/algo/collective_facts.h"
#include "weft/algo/program.h"
#include "weft/algo/registry.h"
#include "weft/comm/communicator.h"
#include "weft/comm/executor.h"
#include "weft/comm/mpi_transport.h"
#include "weft/comm/process.h"
#include "weft/util/env.h"
#include "weft/util/half_float.h"
#include "weft/util/parse.h"

namespace weft::comm {

using algo::Collective;

namespace {

// What one row measures: a collective, or sendrecv (rank r sends to r + 1 and receives from
// r - 1, as nccl-tests' sendrecv_perf).
struct Measured {
  bool sendrecv = false;
  Collective collective = Collective::kAllReduce;
  bool reduces() const { return !sendrecv && algo::facts(collective).reduces; }
  bool rooted() const { return !sendrecv && algo::facts(collective).rooted; }
  bool barrier() const { return !sendrecv && collective == Collective::kBarrier; }
};

Measured parse_measured(std::string name) {
  if (name.size() > 5 && name.compare(name.size() - 5, 5, "_perf") == 0) name.resize(name.size() - 5);
  if (name == "sendrecv") return {true, Collective::kAllReduce};
  if (name == "all_reduce") name = "allreduce";
  if (name == "all_gather") name = "allgather";
  if (name == "all_to_all") name = "alltoall";
  return {false, algo::parse_collective(name)};
}

// Data types by weft's name and by nccl-tests' (the table shows nccl-tests').
struct TypeName {
  DataType type;
  const char* nccl;
  std::vector<const char*> aliases;
};
const std::vector<TypeName>& type_names() {  // in nccl-tests' order of "-d all"
  static const std::vector<TypeName> names = {
      {DataType::kI32, "int32", {"i32", "int"}},        {DataType::kI64, "int64", {"i64"}},
      {DataType::kF16, "half", {"f16", "float16", "fp16"}}, {DataType::kF32, "float", {"f32", "float32", "fp32"}},
      {DataType::kF64, "double", {"f64", "float64"}},   {DataType::kBF16, "bfloat16", {"bf16"}}};
  return names;
}

const char* nccl_type_name(DataType t) {
  for (const auto& n : type_names())
    if (n.type == t) return n.nccl;
  return "?";
}

std::vector<DataType> parse_types(const std::string& s) {
  std::vector<DataType> all;
  for (const auto& n : type_names()) {
    all.push_back(n.type);
    if (s == n.nccl) return {n.type};
    for (const char* a : n.aliases)
      if (s == a) return {n.type};
  }
  if (s == "all") return all;
  throw ConfigError("unknown data type '" + s +
                    "' (known: float, half, bfloat16, double, int32, int64 or f32, f16, bf16, f64, i32, i64; all)");
}

std::vector<ReduceOp> parse_ops(const std::string& s) {
  if (s == "all") return {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg};
  return {parse_op(s)};
}

bool is_half(DataType t) { return t == DataType::kF16 || t == DataType::kBF16; }

void put(DataType t, void* base, std::int64_t i, double v) {
  switch (t) {
    case DataType::kF32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DataType::kF64: static_cast<double*>(base)[i] = v; break;
    case DataType::kI32: static_cast<std::int32_t*>(base)[i] = static_cast<std::int32_t>(v); break;
    case DataType::kI64: static_cast<std::int64_t*>(base)[i] = static_cast<std::int64_t>(v); break;
    case DataType::kF16: static_cast<std::uint16_t*>(base)[i] = f16_from_float(static_cast<float>(v)); break;
    case DataType::kBF16: static_cast<std::uint16_t*>(base)[i] = bf16_from_float(static_cast<float>(v)); break;
    case DataType::kI8: static_cast<std::int8_t*>(base)[i] = static_cast<std::int8_t>(v); break;
    case DataType::kU8: static_cast<std::uint8_t*>(base)[i] = static_cast<std::uint8_t>(v); break;
  }
}

double take(DataType t, const void* base, std::int64_t i) {
  switch (t) {
    case DataType::kF32: return static_cast<const float*>(base)[i];
    case DataType::kF64: return static_cast<const double*>(base)[i];
    case DataType::kI32: return static_cast<const std::int32_t*>(base)[i];
    case DataType::kI64: return static_cast<double>(static_cast<const std::int64_t*>(base)[i]);
    case DataType::kF16: return float_from_f16(static_cast<const std::uint16_t*>(base)[i]);
    case DataType::kBF16: return float_from_bf16(static_cast<const std::uint16_t*>(base)[i]);
    case DataType::kI8: return static_cast<const std::int8_t*>(base)[i];
    case DataType::kU8: return static_cast<const std::uint8_t*>(base)[i];
  }
  return 0;
}

// Small integers, exact in every type (bfloat16 holds integers up to 256 exactly), so that
// results can be checked exactly.
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

// Where a rank's input and output lie, in elements: out of place, the input is its own
// buffer; in place (nccl-tests' layout), both lie in the output buffer, the input at
// `in_place_in` and the output at `in_place_out`.
struct Layout {
  std::int64_t in = 0, out = 0;
  std::int64_t in_place_in = 0, in_place_out = 0;
  bool has_in_place = true;
};

Layout layout_of(const Measured& op, std::int64_t count, int world, int rank) {
  const std::int64_t all = count * world, mine = count * rank;
  if (op.sendrecv) return {count, count, 0, 0, false};
  switch (op.collective) {
    case Collective::kAllReduce: case Collective::kBroadcast: case Collective::kReduce: return {count, count, 0, 0};
    case Collective::kGather: case Collective::kAllGather: return {count, all, mine, 0};
    case Collective::kScatter: case Collective::kReduceScatter: return {all, count, 0, mine};
    case Collective::kAllToAll: return {all, all, 0, 0};
    case Collective::kBarrier: return {0, 0, 0, 0, false};
  }
  return {};
}

// The value rank `rank` holds at input element i: gathered blocks carry their place in the
// result, so that a block in the wrong place shows.
double input_at(const Measured& op, int rank, std::int64_t count, std::int64_t i, ReduceOp rop) {
  const bool gathers = !op.sendrecv && (op.collective == Collective::kGather || op.collective == Collective::kAllGather);
  return input_value(rank, gathers ? rank * count + i : i, rop);
}

// The value output element j must hold on `rank`, or nothing where it is not defined.
std::optional<double> expected_at(const Measured& op, int rank, int world, int root, std::int64_t count,
                                  std::int64_t j, ReduceOp rop, bool integer) {
  if (op.sendrecv) return input_value((rank + world - 1) % world, j, rop);
  switch (op.collective) {
    case Collective::kAllReduce: return reduced_value(world, j, rop, integer);
    case Collective::kReduce:
      if (rank != root) return std::nullopt;
      return reduced_value(world, j, rop, integer);
    case Collective::kBroadcast: return input_value(root, j, rop);
    case Collective::kGather:
      if (rank != root) return std::nullopt;
      return input_value(static_cast<int>(j / count), j, rop);
    case Collective::kAllGather: return input_value(static_cast<int>(j / count), j, rop);
    case Collective::kScatter: return input_value(root, rank * count + j, rop);
    case Collective::kReduceScatter: return reduced_value(world, rank * count + j, rop, integer);
    case Collective::kAllToAll: return input_value(static_cast<int>(j / count), rank * count + j % count, rop);
    case Collective::kBarrier: return std::nullopt;
  }
  return std::nullopt;
}

// nccl-tests' time column: fewer decimals as the time grows.
std::string time_text(double us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, us >= 10000.0 ? "%7.0f" : us >= 100.0 ? "%7.1f" : "%7.2f", us);
  return buf;
}

struct Side {
  bool measured = false;
  double time_us = 0, algbw = 0, busbw = 0;
  std::optional<std::int64_t> wrong;  // nullopt: not checked
};

class Bench {
 public:
  Bench(const BenchConfig& cfg, Measured op, std::shared_ptr<Communicator> comm)
      : cfg_(cfg), op_(op), comm_(std::move(comm)), w_(comm_->size()), r_(comm_->rank()) {}

  // One row: the out-of-place and in-place runs of `bytes` (the requested size), rounded down
  // to whole elements per rank. *shown_out: the size the row reports (nccl-tests' size: rank
  // 0's larger buffer), which its bandwidths are of.
  std::optional<std::pair<Side, Side>> row(std::int64_t bytes, DataType t, ReduceOp rop, std::int64_t* count_out,
                                           std::int64_t* shown_out, std::string* algorithm_out) {
    es_ = static_cast<std::int64_t>(element_size(t));
    const bool total_sized = !op_.sendrecv && algo::data_elements(op_.collective, 1, 2) == 2;
    count_ = op_.barrier() ? 0 : total_sized ? bytes / (es_ * w_) : bytes / es_;
    if (count_ == 0 && !op_.barrier()) return std::nullopt;
    t_ = t;
    rop_ = rop;
    algorithm_ = op_.sendrecv ? "p2p" : op_.barrier() ? comm_->choose_algorithm(Collective::kBarrier, 0)
                 : cfg_.algorithm.empty() ? comm_->choose_algorithm(op_.collective, count_ * es_)
                                          : cfg_.algorithm;
    layout_ = layout_of(op_, count_, w_, r_);
    // The sizes are unchanged from one row to the next when only the type or operator
    // changes: a fresh buffer's first touch (page faults) must not land in the timed region.
    send_.resize(static_cast<std::size_t>(layout_.in * es_));
    recv_.resize(static_cast<std::size_t>(std::max(layout_.in, layout_.out) * es_));
    const Layout first = layout_of(op_, count_, w_, 0);
    const std::int64_t shown = std::max(first.in, first.out) * es_;
    *count_out = count_;
    *shown_out = shown;
    *algorithm_out = algorithm_;
    Side out_of_place = side(false, shown);
    Side in_place = layout_.has_in_place ? side(true, shown) : Side{};
    return std::make_pair(out_of_place, in_place);
  }

 private:
  std::uint8_t* input(bool in_place) { return in_place ? recv_.data() + layout_.in_place_in * es_ : send_.data(); }
  std::uint8_t* output(bool in_place) { return recv_.data() + (in_place ? layout_.in_place_out * es_ : 0); }

  void fill(bool in_place) {
    std::uint8_t* in = input(in_place);
    for (std::int64_t i = 0; i < layout_.in; ++i) put(t_, in, i, input_at(op_, r_, count_, i, rop_));
  }

  void once(bool in_place) {
    const void* in = input(in_place);
    void* out = output(in_place);
    const int root = cfg_.root;
    const std::string& a = algorithm_;
    if (op_.sendrecv) {
      if (w_ == 1) {  // one rank sends to itself: a copy
        std::memmove(out, in, static_cast<std::size_t>(count_ * es_));
        return;
      }
      WorkPtr s = comm_->isend(in, count_, t_, (r_ + 1) % w_);
      WorkPtr v = comm_->irecv(out, count_, t_, (r_ + w_ - 1) % w_);
      s->wait();
      v->wait();
      return;
    }
    switch (op_.collective) {
      case Collective::kAllReduce: comm_->allreduce(in, out, count_, t_, rop_, a)->wait(); break;
      case Collective::kBroadcast:
        if (r_ == root && in != out) std::memcpy(out, in, static_cast<std::size_t>(count_ * es_));
        comm_->broadcast(out, count_, t_, root, a)->wait();
        break;
      case Collective::kReduce: comm_->reduce(in, out, count_, t_, rop_, root, a)->wait(); break;
      case Collective::kGather: comm_->gather(in, out, count_, t_, root, a)->wait(); break;
      case Collective::kScatter: comm_->scatter(in, out, count_, t_, root, a)->wait(); break;
      case Collective::kAllGather: comm_->allgather(in, out, count_, t_, a)->wait(); break;
      case Collective::kReduceScatter: comm_->reduce_scatter(in, out, count_, t_, rop_, a)->wait(); break;
      case Collective::kAllToAll: comm_->alltoall(in, out, count_, t_, a)->wait(); break;
      case Collective::kBarrier: comm_->barrier()->wait(); break;
    }
  }

  std::int64_t wrong_elements(bool in_place) {
    const std::uint8_t* out = output(in_place);
    const bool integer = t_ == DataType::kI32 || t_ == DataType::kI64;
    // A 16-bit float rounds at each combine: allow a few units in the last place per rank.
    const double tolerance = t_ == DataType::kBF16 ? std::ldexp(1.0, -8) * w_
                             : t_ == DataType::kF16 ? std::ldexp(1.0, -11) * w_ : 0.0;
    std::int64_t wrong = 0;
    std::uint8_t cell[8];
    for (std::int64_t j = 0; j < layout_.out; ++j) {
      const auto want = expected_at(op_, r_, w_, cfg_.root, count_, j, rop_, integer);
      if (!want) continue;
      put(t_, cell, 0, *want);  // the expected value as the type holds it
      const double exact = take(t_, cell, 0), got = take(t_, out, j);
      wrong += is_half(t_) ? !(std::fabs(got - exact) <= tolerance * std::fabs(exact)) : got != exact;
    }
    return wrong;
  }

  // Combines the ranks' times as -a says.
  double across_ranks(double us) {
    double v = cfg_.average == 0 && r_ != 0 ? 0.0 : us;
    const ReduceOp how = cfg_.average == 2 ? ReduceOp::kMin : cfg_.average == 3 ? ReduceOp::kMax : ReduceOp::kSum;
    comm_->allreduce(&v, 1, DataType::kF64, how, "recursive_doubling")->wait();
    return cfg_.average == 1 ? v / w_ : v;
  }

  Side side(bool in_place, std::int64_t bytes) {
    Side s;
    s.measured = true;
    // Inputs are filled once before the repeats (filling between them would run into the
    // timed part of ranks that finish later when ranks share cores); in place, the repeats
    // then combine results of results, which costs the same. The check runs once more on
    // fresh inputs, as nccl-tests does.
    fill(in_place);
    std::vector<double> times;
    for (int it = 0; it < cfg_.warmup + cfg_.iters; ++it) {
      comm_->barrier()->wait();
      if (r_ == cfg_.late_rank) std::this_thread::sleep_for(std::chrono::microseconds(cfg_.late_us));
      const auto t0 = std::chrono::steady_clock::now();
      once(in_place);
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      if (it >= cfg_.warmup) times.push_back(us);
    }
    std::sort(times.begin(), times.end());
    s.time_us = across_ranks(times[times.size() / 2]);
    if (!op_.barrier()) {
      s.algbw = s.time_us > 0 ? static_cast<double>(bytes) / (s.time_us * 1e3) : 0.0;
      s.busbw = s.algbw * (op_.sendrecv ? 1.0 : algo::busbw_factor(op_.collective, w_));
    }
    if (cfg_.check && !op_.barrier()) {
      fill(in_place);
      comm_->barrier()->wait();
      once(in_place);
      std::int64_t wrong = wrong_elements(in_place);
      comm_->allreduce(&wrong, 1, DataType::kI64, ReduceOp::kSum, "recursive_doubling")->wait();
      s.wrong = wrong;
    }
    return s;
  }

  const BenchConfig& cfg_;
  Measured op_;
  std::shared_ptr<Communicator> comm_;
  int w_, r_;
  DataType t_ = DataType::kF32;
  ReduceOp rop_ = ReduceOp::kSum;
  std::int64_t es_ = 4, count_ = 0;
  std::string algorithm_;
  Layout layout_;
  std::vector<std::uint8_t> send_, recv_;
};

void print_header(const BenchConfig& cfg, Communicator& comm) {
  // Every rank's process and host, gathered to rank 0 (nccl-tests' "Using devices").
  constexpr int kWords = 8;
  std::vector<std::int64_t> mine(kWords, 0), all(static_cast<std::size_t>(kWords * comm.size()));
  mine[0] = ::getpid();
  ::gethostname(reinterpret_cast<char*>(&mine[1]), (kWords - 1) * 8 - 1);
  comm.allgather(mine.data(), all.data(), kWords, DataType::kI64, "ring")->wait();
  if (comm.rank() != 0 || cfg.json) return;
  const char* combine[] = {"rank 0's", "the mean of the ranks'", "the least of the ranks'", "the slowest rank's"};
  std::printf("# weft comm-bench %s: %d ranks, transport %s; time: %s median over %d iterations after %d warm-up\n",
              cfg.op.c_str(), comm.size(), comm.transport().c_str(), combine[cfg.average], cfg.iters, cfg.warmup);
  if (cfg.late_rank >= 0)
    std::printf("# rank %d starts every repeat %lld us after the others (the others' times include the wait)\n",
                cfg.late_rank, static_cast<long long>(cfg.late_us));
  const bool factor = cfg.step_bytes == 0 || cfg.step_factor > 1;
  std::printf("# nThread 1 nGpus 1 minBytes %lld maxBytes %lld step: %lld(%s) warmup iters: %d iters: %d agg iters: 1 "
              "validation: %d graph: 0\n#\n# Using devices\n",
              static_cast<long long>(cfg.min_bytes), static_cast<long long>(cfg.max_bytes),
              static_cast<long long>(factor ? cfg.step_factor : cfg.step_bytes), factor ? "factor" : "bytes",
              cfg.warmup, cfg.iters, cfg.check ? 1 : 0);
  for (int r = 0; r < comm.size(); ++r) {
    const std::int64_t* rec = &all[static_cast<std::size_t>(r * kWords)];
    std::printf("#  Rank %2d Group  0 Pid %6lld on %10s device  - [cpu] %s\n", r, static_cast<long long>(rec[0]),
                reinterpret_cast<const char*>(rec + 1), comm.transport().c_str());
  }
  std::printf("#\n# %10s  %12s  %8s  %6s  %6s            out-of-place                       in-place          \n", "", "",
              "", "", "");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type",
              "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "", "",
              "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

// The algorithm each row ran, for a comment line after nccl-tests' footer (a parser of
// nccl-tests' rows counts their columns, from either end: the rows keep them exactly):
// consecutive rows that ran the same one as a range of sizes, "1024 B recursive_doubling;
// 2048-1048576 B ring".
class AlgorithmRuns {
 public:
  void add(std::int64_t bytes, const std::string& algorithm) {
    if (runs_.empty() || runs_.back().algorithm != algorithm) runs_.push_back({bytes, bytes, algorithm});
    runs_.back().last = bytes;
  }
  std::string text() const {
    std::string out;
    for (const Run& r : runs_) {
      out += out.empty() ? "" : "; ";
      out += r.first == r.last ? std::to_string(r.first) : std::to_string(r.first) + "-" + std::to_string(r.last);
      out += " B " + r.algorithm;
    }
    return out;
  }

 private:
  struct Run {
    std::int64_t first, last;
    std::string algorithm;
  };
  std::vector<Run> runs_;
};

std::string side_text(const Side& s, bool barrier) {
  if (!s.measured) return "      N/A     N/A     N/A     N/A";
  char buf[96];
  const std::string wrong = s.wrong ? std::to_string(*s.wrong) : "N/A";
  if (barrier) {
    std::snprintf(buf, sizeof buf, "  %7s  %6s  %6s  %6s", time_text(s.time_us).c_str(), "N/A", "N/A", wrong.c_str());
  } else {
    std::snprintf(buf, sizeof buf, "  %7s  %6.2f  %6.2f  %6s", time_text(s.time_us).c_str(), s.algbw, s.busbw,
                  wrong.c_str());
  }
  return buf;
}

// A run's fields as JSON members (no braces): "time_us":..,"algbw_gbps":..,"busbw_gbps":..,"wrong":..
// (the bandwidths to six significant digits: the table's two decimals of GB/s say nothing of
// a few bytes' run)
std::string side_json(const Side& s, bool barrier) {
  char buf[160];
  const std::string wrong = s.wrong ? std::to_string(*s.wrong) : "null";
  if (barrier) {
    std::snprintf(buf, sizeof buf, "\"time_us\":%.2f,\"algbw_gbps\":null,\"busbw_gbps\":null,\"wrong\":%s", s.time_us,
                  wrong.c_str());
  } else {
    std::snprintf(buf, sizeof buf, "\"time_us\":%.2f,\"algbw_gbps\":%.6g,\"busbw_gbps\":%.6g,\"wrong\":%s", s.time_us,
                  s.algbw, s.busbw, wrong.c_str());
  }
  return buf;
}

void validate(const BenchConfig& cfg) {
  if (cfg.min_bytes < 0 || cfg.max_bytes < cfg.min_bytes) throw ConfigError("--min (-b) must be <= --max (-e)");
  if (cfg.max_bytes > (std::int64_t{1} << 40)) throw ConfigError("--max (-e): at most 1T (2^40 bytes) per buffer");
  if (cfg.iters < 1 || cfg.warmup < 0) throw ConfigError("--iters (-n) must be >= 1 and --warmup (-w) >= 0");
  if (cfg.step_factor < 1 || cfg.step_factor > 1024) throw ConfigError("-f (step factor) must be in 1..1024");
  if (cfg.step_bytes < 0) throw ConfigError("-i (step bytes) must be >= 0");
  if (cfg.step_factor == 1 && cfg.step_bytes == 0) throw ConfigError("-f 1 needs a step in bytes (-i)");
  if (cfg.step_factor > 1 && cfg.step_bytes > 0)
    throw ConfigError("-i (step bytes) adds bytes from row to row with -f 1; with -f " + std::to_string(cfg.step_factor) +
                      " the sizes multiply: give one of them");
  if (cfg.average < 0 || cfg.average > 3) throw ConfigError("-a must be 0 (rank 0), 1 (mean), 2 (min) or 3 (max)");
  if (cfg.late_rank >= 0 && (cfg.late_us < 0 || cfg.late_us > 10000000))
    throw ConfigError("--late: the delay must be 0 to 10000000 microseconds");
}

}  // namespace

void print_collectives() {
  for (int c = 0; c <= static_cast<int>(Collective::kBarrier); ++c) {
    const auto coll = static_cast<Collective>(c);
    std::printf("%-15s", algo::collective_name(coll));
    for (const auto& a : algo::algorithm_names(coll)) std::printf(" %s", a.c_str());
    std::printf("\n");
  }
  std::printf("%-15s %s\n", "sendrecv", "p2p (rank r sends to r + 1, receives from r - 1)");
  std::printf("(without --algo, the selection table picks per size: docs/communication.md)\n");
}

int run_comm_bench(const BenchConfig& cfg) {
  validate(cfg);
  const Measured op = parse_measured(cfg.op);
  const std::vector<DataType> types = op.barrier() ? std::vector<DataType>{DataType::kF32} : parse_types(cfg.dtype);
  const std::vector<ReduceOp> ops = op.reduces() ? parse_ops(cfg.reduce) : std::vector<ReduceOp>{ReduceOp::kSum};
  if (!op.reduces()) parse_ops(cfg.reduce);  // a misspelt -o is an error everywhere
  // A reduction or a root for a collective that has none is an error (their defaults, as
  // nccl-tests' scripts pass them to every test, are not).
  if (!op.reduces() && cfg.reduce != BenchConfig{}.reduce)
    throw ConfigError("--reduce (-o) " + cfg.reduce + ": " + cfg.op + " reduces nothing");
  if (!op.rooted() && cfg.root != BenchConfig{}.root)
    throw ConfigError("--root (-r) " + std::to_string(cfg.root) + ": " + cfg.op +
                      " has no root (broadcast, reduce, gather and scatter have)");
  if ((op.sendrecv || op.barrier()) && !cfg.algorithm.empty())
    throw ConfigError(std::string("--algo: ") + (op.sendrecv ? "sendrecv" : "barrier") + " has no algorithms to choose");
  std::optional<double> min_bw;
  if (auto v = env_string("NCCL_TESTS_MIN_BW")) {
    min_bw = parse_number(*v);
    if (!min_bw || *min_bw < 0) throw ConfigError("NCCL_TESTS_MIN_BW='" + *v + "' is not a bandwidth in GB/s");
  }
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
  if (cfg.late_rank >= w)
    throw ConfigError("--late: rank " + std::to_string(cfg.late_rank) + " is outside 0.." + std::to_string(w - 1));
  if (op.rooted() && (cfg.root < 0 || cfg.root >= w))
    throw ConfigError("--root (-r) " + std::to_string(cfg.root) + " is outside 0.." + std::to_string(w - 1));
  print_header(cfg, *comm);

  Bench bench(cfg, op, comm);
  AlgorithmRuns ran;
  std::int64_t total_wrong = 0;
  double bw_sum = 0;
  int bw_count = 0;
  for (DataType t : types) {
    for (ReduceOp rop : ops) {
      const std::int64_t start = op.barrier() ? 0 : std::max<std::int64_t>(cfg.min_bytes, 1);
      for (std::int64_t bytes = start; bytes <= cfg.max_bytes;
           bytes = cfg.step_factor > 1 ? bytes * cfg.step_factor : bytes + cfg.step_bytes) {
        std::int64_t count = 0, shown = 0;
        std::string algorithm;
        const auto sides = bench.row(bytes, t, rop, &count, &shown, &algorithm);
        if (!sides) continue;
        const auto& [oop, ip] = *sides;
        for (const Side* s : {&oop, &ip}) {
          total_wrong += s->wrong.value_or(0);
          if (s->measured && !op.barrier()) {
            bw_sum += s->busbw;
            ++bw_count;
          }
        }
        const char* redop = op.reduces() ? op_name(rop) : "none";
        const int root = op.rooted() ? cfg.root : -1;
        if (r == 0) {
          if (cfg.json) {
            // The out-of-place run's fields at the top (as the reference harnesses of bench/
            // print theirs), the in-place run's under "in_place".
            std::string in_place = "null";
            if (ip.measured) {
              in_place = side_json(ip, op.barrier());
              in_place.insert(in_place.begin(), '{');
              in_place.push_back('}');
            }
            std::printf("{\"op\":\"%s\",\"ranks\":%d,\"transport\":\"%s\",\"bytes\":%lld,\"count\":%lld,"
                        "\"dtype\":\"%s\",\"redop\":\"%s\",\"root\":%d,\"algorithm\":\"%s\",%s,\"in_place\":%s}\n",
                        op.sendrecv ? "sendrecv" : algo::collective_name(op.collective), w, comm->transport().c_str(),
                        static_cast<long long>(shown), static_cast<long long>(count), dtype_name(t), redop, root,
                        algorithm.c_str(), side_json(oop, op.barrier()).c_str(), in_place.c_str());
          } else {
            std::printf("%12lld  %12lld  %8s  %6s  %6d%s%s\n", static_cast<long long>(shown),
                        static_cast<long long>(count), op.barrier() ? "none" : nccl_type_name(t), redop, root,
                        side_text(oop, op.barrier()).c_str(), side_text(ip, op.barrier()).c_str());
            ran.add(shown, algorithm);
          }
          std::fflush(stdout);
        }
        if (op.barrier()) break;
      }
    }
  }
  comm->barrier()->wait();
  const double avg = bw_count > 0 ? bw_sum / bw_count : 0.0;
  const bool bw_failed = min_bw && bw_count > 0 && avg < *min_bw * 0.9;
  if (r == 0 && !cfg.json) {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(total_wrong), total_wrong ? "FAILED" : "OK");
    if (bw_count == 0) {
      std::printf("# Avg bus bandwidth    : N/A (a barrier moves no data)\n#\n");
    } else {
      std::printf("# Avg bus bandwidth    : %g %s\n#\n", avg, !min_bw ? "" : bw_failed ? "FAILED" : "OK");
    }
    std::printf("# Algorithms           : %s\n#\n", ran.text().c_str());
    // How rank 0's waits for its peers went (wait_policy.h): pauses of the core, yields of
    // it (and those that kept it off the core for over a millisecond), sleeps.
    const WaitCounts waits = wait_counts();
    std::printf("# Waits of rank 0      : %ld pauses, %ld yields (%ld long, %ld to other programs), %ld sleeps\n#\n",
                waits.pauses, waits.yields, waits.long_yields, waits.yields_to_strangers, waits.sleeps);
    std::fflush(stdout);
  }
  if (total_wrong > 0 && r == 0)
    std::fprintf(stderr, "comm-bench: %lld wrong elements\n", static_cast<long long>(total_wrong));
  return total_wrong == 0 && !bw_failed ? 0 : 1;
}

}  // namespace weft::comm
