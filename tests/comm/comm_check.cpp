// Multi-process checks of the communicator, run under `weft launch` by ctest:
//   comm_check collectives   every collective x algorithm x dtype x count, checked exactly
//   comm_check kill          rank 1 dies in the middle of an all-reduce; the others must fail
//                            with a CommError naming the operation and the peer
//   comm_check stall         rank 1 stops (SIGSTOP); the others fail once the timeout passes
//   comm_check token         rank 1 holds another job's token; the job fails, naming it
//   comm_check hostile       a thread throws random bytes at the store during rendezvous
//   comm_check properties    random cases (collective, algorithm, dtype, count, root, op,
//                            in place or not, a random sub-group in a random order) against
//                            a reference computed from every member's inputs; CHECK_SEED
//                            and CHECK_CASES choose them (every rank draws the same cases)
// Environment: CHECK_FAKE_HOSTS=H pretends the ranks run on H hosts (mixed transports).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <fstream>
#include <nlohmann/json.hpp>

#include "weft/algo/registry.h"
#include "weft/comm/communicator.h"
#include "weft/comm/executor.h"
#include "weft/comm/socket.h"
#include "weft/comm/store.h"
#include "weft/util/half_float.h"

using namespace weft;
using namespace weft::comm;
using algo::Collective;

namespace {

int g_failures = 0;
int g_checks = 0;
int g_refused = 0;  // property cases an algorithm refused (on every member)

void fail(const std::string& what) {
  ++g_failures;
  if (g_failures <= 20) std::fprintf(stderr, "FAIL: %s\n", what.c_str());
}

double input(int rank, std::int64_t i, ReduceOp op) {
  if (op == ReduceOp::kProd) return 1.0 + static_cast<double>((rank + i) % 2);
  return static_cast<double>((rank + 1) * 3 + i % 7) * (op == ReduceOp::kMin && rank % 2 ? -1 : 1);
}

double reduced(int w, std::int64_t i, ReduceOp op, bool integer) {
  double acc = input(0, i, op);
  for (int r = 1; r < w; ++r) {
    double v = input(r, i, op);
    if (op == ReduceOp::kSum || op == ReduceOp::kAvg) acc += v;
    if (op == ReduceOp::kProd) acc *= v;
    if (op == ReduceOp::kMax) acc = std::max(acc, v);
    if (op == ReduceOp::kMin) acc = std::min(acc, v);
  }
  if (op == ReduceOp::kAvg) acc = integer ? std::trunc(acc / w) : acc / w;
  return acc;
}

struct Buf {
  DataType t;
  std::vector<std::uint8_t> b;
  Buf(DataType type, std::int64_t n) : t(type), b(static_cast<size_t>(std::max<std::int64_t>(n, 1)) * element_size(type), 0xAB) {}
  void set(std::int64_t i, double v) {
    switch (t) {
      case DataType::kF32: reinterpret_cast<float*>(b.data())[i] = static_cast<float>(v); break;
      case DataType::kF64: reinterpret_cast<double*>(b.data())[i] = v; break;
      case DataType::kI32: reinterpret_cast<std::int32_t*>(b.data())[i] = static_cast<std::int32_t>(v); break;
      case DataType::kI64: reinterpret_cast<std::int64_t*>(b.data())[i] = static_cast<std::int64_t>(v); break;
      case DataType::kF16: reinterpret_cast<std::uint16_t*>(b.data())[i] = f16_from_float(static_cast<float>(v)); break;
      case DataType::kBF16: reinterpret_cast<std::uint16_t*>(b.data())[i] = bf16_from_float(static_cast<float>(v)); break;
      case DataType::kI8: reinterpret_cast<std::int8_t*>(b.data())[i] = static_cast<std::int8_t>(v); break;
      case DataType::kU8: b[static_cast<size_t>(i)] = static_cast<std::uint8_t>(v); break;
    }
  }
  double get(std::int64_t i) const {
    switch (t) {
      case DataType::kF32: return reinterpret_cast<const float*>(b.data())[i];
      case DataType::kF64: return reinterpret_cast<const double*>(b.data())[i];
      case DataType::kI32: return reinterpret_cast<const std::int32_t*>(b.data())[i];
      case DataType::kI64: return static_cast<double>(reinterpret_cast<const std::int64_t*>(b.data())[i]);
      case DataType::kF16: return float_from_f16(reinterpret_cast<const std::uint16_t*>(b.data())[i]);
      case DataType::kBF16: return float_from_bf16(reinterpret_cast<const std::uint16_t*>(b.data())[i]);
      case DataType::kI8: return reinterpret_cast<const std::int8_t*>(b.data())[i];
      case DataType::kU8: return b[static_cast<size_t>(i)];
    }
    return 0;
  }
  void* p() { return b.data(); }
};

std::string fmt_case(std::uint64_t seed, int c, const algo::Algorithm& a, DataType dt, ReduceOp op, std::int64_t n, int root,
                     bool in_place, int w) {
  return "seed " + std::to_string(seed) + " case " + std::to_string(c) + ": " + algo::collective_name(a.collective) + "/" +
         a.name + " " + dtype_name(dt) + " " + op_name(op) + " count " + std::to_string(n) + " root " + std::to_string(root) +
         (in_place ? " in place" : "") + " on " + std::to_string(w) + " ranks";
}

void expect(bool ok, const std::string& what) {
  ++g_checks;
  if (!ok) fail(what);
}

void check_collectives(Communicator& comm) {
  const int w = comm.size(), r = comm.rank();
  const std::vector<std::int64_t> counts{0, 1, std::max(w - 1, 1), w + 1, 1003};
  const std::vector<std::int64_t> block_counts{0, 1, 3, 257};
  std::vector<algo::Algorithm> all = algo::algorithms();
  if (comm.transport() == "mpi") {  // MPI's own collectives too
    for (Collective c : algo::all_collectives()) all.push_back({c, "mpi", nullptr, "MPI"});
  }
  for (const auto& a : all) {
    const std::string tag = std::string(algo::collective_name(a.collective)) + "/" + a.name;
    // 16-bit floats: the small integers of input() are exact in them up to 8 ranks.
    for (DataType dt : {DataType::kF32, DataType::kF64, DataType::kI32, DataType::kI64, DataType::kF16, DataType::kBF16,
                        DataType::kU8}) {
      if ((dt == DataType::kF16 || dt == DataType::kBF16) && (w > 8 || comm.transport() == "mpi")) continue;
      if (dt == DataType::kU8 && w > 4) continue;  // input() sums stay under 256 up to 4 ranks
      const bool integer = dt == DataType::kI32 || dt == DataType::kI64 || dt == DataType::kU8;
      const std::string dts = tag + " " + dtype_name(dt);
      switch (a.collective) {
        case Collective::kAllReduce:
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd}) {
            for (std::int64_t n : counts) {
              for (bool in_place : {true, false}) {
                Buf in(dt, n), out(dt, n);
                for (std::int64_t i = 0; i < n; ++i) in.set(i, input(r, i, op));
                if (in_place) {
                  comm.allreduce(in.p(), n, dt, op, a.name)->wait();
                } else {
                  comm.allreduce(in.p(), out.p(), n, dt, op, a.name)->wait();
                }
                Buf& res = in_place ? in : out;
                std::int64_t bad = 0;
                for (std::int64_t i = 0; i < n; ++i) bad += res.get(i) != static_cast<double>(static_cast<float>(reduced(w, i, op, integer))) && res.get(i) != reduced(w, i, op, integer);
                expect(bad == 0, dts + " " + op_name(op) + " n=" + std::to_string(n) + (in_place ? " in-place" : "") +
                                     ": " + std::to_string(bad) + " wrong");
              }
            }
            if (dt != DataType::kF32 && dt != DataType::kI64) break;  // every op on f32 and i64
          }
          break;
        case Collective::kBroadcast:
        case Collective::kReduce:
          for (int root : {0, w - 1}) {
            for (std::int64_t n : counts) {
              Buf in(dt, n), out(dt, n);
              for (std::int64_t i = 0; i < n; ++i) in.set(i, input(r, i, ReduceOp::kSum));
              std::int64_t bad = 0;
              if (a.collective == Collective::kBroadcast) {
                comm.broadcast(in.p(), n, dt, root, a.name)->wait();
                for (std::int64_t i = 0; i < n; ++i) bad += in.get(i) != input(root, i, ReduceOp::kSum);
              } else {
                comm.reduce(in.p(), out.p(), n, dt, ReduceOp::kSum, root, a.name)->wait();
                if (r == root)
                  for (std::int64_t i = 0; i < n; ++i) bad += out.get(i) != reduced(w, i, ReduceOp::kSum, integer);
                for (std::int64_t i = 0; i < n; ++i) bad += in.get(i) != input(r, i, ReduceOp::kSum);  // input kept
              }
              expect(bad == 0, dts + " root " + std::to_string(root) + " n=" + std::to_string(n));
            }
          }
          break;
        case Collective::kGather:
        case Collective::kScatter:
        case Collective::kAllGather:
          for (int root : {0, w - 1}) {
            for (std::int64_t c : block_counts) {
              std::int64_t bad = 0;
              if (a.collective == Collective::kScatter) {
                Buf in(dt, c * w), out(dt, c);
                for (std::int64_t i = 0; i < c * w; ++i) in.set(i, input(r, i, ReduceOp::kSum));
                comm.scatter(in.p(), out.p(), c, dt, root, a.name)->wait();
                for (std::int64_t i = 0; i < c; ++i) bad += out.get(i) != input(root, r * c + i, ReduceOp::kSum);
              } else {
                Buf in(dt, c), out(dt, c * w);
                for (std::int64_t i = 0; i < c; ++i) in.set(i, input(r, r * c + i, ReduceOp::kSum));
                if (a.collective == Collective::kGather) comm.gather(in.p(), out.p(), c, dt, root, a.name)->wait();
                else comm.allgather(in.p(), out.p(), c, dt, a.name)->wait();
                if (a.collective == Collective::kAllGather || r == root)
                  for (std::int64_t i = 0; i < c * w; ++i) bad += out.get(i) != input(static_cast<int>(i / c), i, ReduceOp::kSum);
              }
              expect(bad == 0, dts + " root " + std::to_string(root) + " count " + std::to_string(c));
            }
            if (a.collective == Collective::kAllGather) break;
          }
          break;
        case Collective::kReduceScatter:
          for (std::int64_t c : block_counts) {
            Buf in(dt, c * w), out(dt, c);
            for (std::int64_t i = 0; i < c * w; ++i) in.set(i, input(r, i, ReduceOp::kSum));
            comm.reduce_scatter(in.p(), out.p(), c, dt, ReduceOp::kSum, a.name)->wait();
            std::int64_t bad = 0;
            for (std::int64_t i = 0; i < c; ++i) bad += out.get(i) != reduced(w, r * c + i, ReduceOp::kSum, integer);
            expect(bad == 0, dts + " count " + std::to_string(c));
          }
          break;
        case Collective::kAllToAll:
          for (std::int64_t c : block_counts) {
            Buf in(dt, c * w), out(dt, c * w);
            for (std::int64_t i = 0; i < c * w; ++i) in.set(i, input(r, i, ReduceOp::kSum));
            comm.alltoall(in.p(), out.p(), c, dt, a.name)->wait();
            std::int64_t bad = 0;
            for (std::int64_t b = 0; b < w; ++b)
              for (std::int64_t j = 0; j < c; ++j)
                bad += out.get(b * c + j) != input(static_cast<int>(b), r * c + j, ReduceOp::kSum);
            expect(bad == 0, dts + " count " + std::to_string(c));
          }
          break;
        case Collective::kBarrier:
          comm.barrier()->wait();
          break;
      }
    }
  }
}

void check_reproducible_and_async(Communicator& comm) {
  const int r = comm.rank();
  const std::int64_t n = 100003;
  std::vector<float> a(n), b(n);
  std::mt19937 gen(static_cast<unsigned>(r) + 1);
  std::uniform_real_distribution<float> d(-1, 1);
  for (auto& v : a) v = d(gen);
  b = a;
  for (const char* algo : {"ring", "rabenseifner", "double_tree", "direct"}) {
    std::vector<float> x = a, y = a;
    // Two asynchronous operations in flight, then their results must match bitwise.
    auto w1 = comm.allreduce(x.data(), n, DataType::kF32, ReduceOp::kSum, algo);
    auto w2 = comm.allreduce(y.data(), n, DataType::kF32, ReduceOp::kSum, algo);
    w2->wait();
    expect(w1->test(), std::string("async ") + algo + ": operations finish in order");
    w1->wait();
    expect(std::memcmp(x.data(), y.data(), n * 4) == 0, std::string("bitwise reproducible ") + algo);
    // Every rank holds the same bits.
    std::vector<float> first(x.begin(), x.begin() + 64);
    comm.broadcast(first.data(), 64, DataType::kF32, 0)->wait();
    expect(std::memcmp(first.data(), x.data(), 64 * 4) == 0, std::string("identical on all ranks ") + algo);
  }
}

// An operation runs on the thread that waits for it, or on the communicator's thread once
// started; one that is neither waited for nor started does not run.
void check_start(Communicator& comm) {
  const int w = comm.size();
  const std::int64_t n = 1 << 16;
  const auto never = std::chrono::steady_clock::time_point{};
  std::vector<float> x(n, static_cast<float>(comm.rank() + 1));
  auto lazy = comm.allreduce(x.data(), n, DataType::kF32, ReduceOp::kSum);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  expect(lazy->finished_at() == never, "an operation neither waited for nor started has not run");
  lazy->start();
  // Nothing here calls into the communicator: only its own thread can finish the operation.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (lazy->finished_at() == never && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  expect(lazy->finished_at() != never, "a started operation finishes on the communicator's thread");
  lazy->wait();
  expect(x[0] == static_cast<float>(w * (w + 1) / 2) && x[n - 1] == x[0], "started all-reduce result");
}

void check_p2p_and_groups(Communicator& comm) {
  const int w = comm.size(), r = comm.rank();
  // A ring exchange: send right and receive from the left at once. 16 MiB: more than any
  // ring or socket buffer holds, so it only completes if both run together.
  const std::int64_t n = 2 << 20;
  std::vector<std::int64_t> out(n, r), in(n, -1);
  auto s = comm.isend(out.data(), n, DataType::kI64, (r + 1) % w);
  auto q = comm.irecv(in.data(), n, DataType::kI64, (r + w - 1) % w);
  s->wait();
  q->wait();
  expect(in[0] == (r + w - 1) % w && in[n - 1] == (r + w - 1) % w, "ring exchange with isend/irecv");
  if (w >= 2) {
    // Even and odd ranks form groups; each group reduces its own ranks.
    std::vector<int> mine;
    for (int i = r % 2; i < w; i += 2) mine.push_back(i);
    auto g = comm.new_group(mine);
    std::int64_t v = r, want = 0;
    for (int i : mine) want += i;
    g->allreduce(&v, 1, DataType::kI64, ReduceOp::kSum)->wait();
    expect(v == want, "sub-group all-reduce");
    expect(g->size() == static_cast<int>(mine.size()), "sub-group size");
  }
}

// Ranks that call different operations refuse each other's messages with one line naming
// both sides, even where the byte counts agree: on a group of ranks 0 and 1 (each case its
// own group: a refused operation ends its group), rank 1 all-reduces 10 f64 against rank
// 0's 20 f32, then i32 against f32, then MAX against SUM. Both ranks receive in each, so
// both refuse.
void check_mismatches_refused(Communicator& comm) {
  const int r = comm.rank();
  if (comm.size() < 2 || r > 1 || comm.transport() == "mpi") return;  // (MPI's messages carry no header)
  std::vector<int> pair = {0, 1};
  struct Case {
    DataType dtype;
    std::int64_t count;
    ReduceOp op;
    const char* mine;
  };
  const Case rank0[] = {{DataType::kF32, 20, ReduceOp::kSum, "allreduce (sum) of 20 f32"},
                        {DataType::kF32, 8, ReduceOp::kSum, "of 8 f32"},
                        {DataType::kF32, 6, ReduceOp::kSum, "allreduce (sum) of 6 f32"}};
  const Case rank1[] = {{DataType::kF64, 10, ReduceOp::kSum, "allreduce (sum) of 10 f64"},
                        {DataType::kI32, 8, ReduceOp::kSum, "of 8 i32"},
                        {DataType::kF32, 6, ReduceOp::kMax, "allreduce (max) of 6 f32"}};
  for (int k = 0; k < 3; ++k) {
    auto g = comm.new_group(pair);
    const Case& me = r == 0 ? rank0[k] : rank1[k];
    const Case& other = r == 0 ? rank1[k] : rank0[k];
    std::vector<std::uint8_t> buf(static_cast<std::size_t>(me.count) * element_size(me.dtype), 1);
    std::string error;
    try {
      g->allreduce(buf.data(), me.count, me.dtype, me.op)->wait();
    } catch (const CommError& e) {
      error = e.what();
    }
    expect(error.find(me.mine) != std::string::npos && error.find(other.mine) != std::string::npos &&
               error.find('\n') == std::string::npos,
           std::string("mismatch case ") + std::to_string(k) + " refused with both sides named, got: " + error);
  }
}

// A member's input element: a small integer from (seed, case, rank, i), so that every rank
// can compute every other's and sums, products and averages are exact in every dtype.
double property_input(std::uint64_t seed, int c, int rank, std::int64_t i, ReduceOp op) {
  std::uint64_t h = seed * 0x9E3779B97F4A7C15ull ^ (static_cast<std::uint64_t>(c) << 40) ^
                    (static_cast<std::uint64_t>(rank) << 32) ^ static_cast<std::uint64_t>(i);
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  if (op == ReduceOp::kProd) return h % 3 == 0 ? -1.0 : h % 3 == 1 ? 1.0 : 2.0;
  return static_cast<double>(static_cast<int>(h % 17) - 8);
}

double property_reduce(const std::vector<double>& values, ReduceOp op, bool integer) {
  double acc = values[0];
  for (std::size_t k = 1; k < values.size(); ++k) {
    const double v = values[k];
    if (op == ReduceOp::kSum || op == ReduceOp::kAvg) acc += v;
    if (op == ReduceOp::kProd) acc *= v;
    if (op == ReduceOp::kMax) acc = std::max(acc, v);
    if (op == ReduceOp::kMin) acc = std::min(acc, v);
  }
  const double n = static_cast<double>(values.size());
  if (op == ReduceOp::kAvg) acc = integer ? std::trunc(acc / n) : acc / n;
  return acc;
}

bool same_value(double got, double want, DataType dt) {
  return got == want || (dt == DataType::kF32 && got == static_cast<double>(static_cast<float>(want)));
}

// Runs one case; returns the number of wrong elements.
template <typename In, typename Reduce>
std::int64_t property_run(Communicator& comm, const algo::Algorithm& a, DataType dt, ReduceOp op, std::int64_t n, int root,
                          bool in_place, bool integer, const In& in_of, const Reduce& reduce_at) {
  const int w = comm.size(), r = comm.rank();
  (void)integer;
  std::int64_t bad = 0;
  switch (a.collective) {
    case Collective::kAllReduce: {
      Buf in(dt, n), out(dt, n);
      for (std::int64_t i = 0; i < n; ++i) in.set(i, in_of(r, i, op));
      if (in_place) comm.allreduce(in.p(), n, dt, op, a.name)->wait();
      else comm.allreduce(in.p(), out.p(), n, dt, op, a.name)->wait();
      const Buf& res = in_place ? in : out;
      for (std::int64_t i = 0; i < n; ++i) bad += !same_value(res.get(i), reduce_at(i, op), dt);
      break;
    }
    case Collective::kBroadcast: {
      Buf in(dt, n);
      for (std::int64_t i = 0; i < n; ++i) in.set(i, in_of(r, i, ReduceOp::kSum));
      comm.broadcast(in.p(), n, dt, root, a.name)->wait();
      for (std::int64_t i = 0; i < n; ++i) bad += in.get(i) != in_of(root, i, ReduceOp::kSum);
      break;
    }
    case Collective::kReduce: {
      Buf in(dt, n), out(dt, n);
      for (std::int64_t i = 0; i < n; ++i) in.set(i, in_of(r, i, op));
      comm.reduce(in.p(), out.p(), n, dt, op, root, a.name)->wait();
      if (r == root)
        for (std::int64_t i = 0; i < n; ++i) bad += !same_value(out.get(i), reduce_at(i, op), dt);
      for (std::int64_t i = 0; i < n; ++i) bad += in.get(i) != in_of(r, i, op);  // the input is kept
      break;
    }
    case Collective::kScatter: {
      Buf in(dt, n * w), out(dt, n);
      for (std::int64_t i = 0; i < n * w; ++i) in.set(i, in_of(r, i, ReduceOp::kSum));
      comm.scatter(in.p(), out.p(), n, dt, root, a.name)->wait();
      for (std::int64_t i = 0; i < n; ++i) bad += out.get(i) != in_of(root, r * n + i, ReduceOp::kSum);
      break;
    }
    case Collective::kGather:
    case Collective::kAllGather: {
      Buf in(dt, n), out(dt, n * w);
      for (std::int64_t i = 0; i < n; ++i) in.set(i, in_of(r, i, ReduceOp::kSum));
      if (a.collective == Collective::kGather) comm.gather(in.p(), out.p(), n, dt, root, a.name)->wait();
      else comm.allgather(in.p(), out.p(), n, dt, a.name)->wait();
      if (a.collective == Collective::kAllGather || r == root)
        for (std::int64_t i = 0; i < n * w; ++i) bad += out.get(i) != in_of(static_cast<int>(i / n), i % n, ReduceOp::kSum);
      break;
    }
    case Collective::kReduceScatter: {
      Buf in(dt, n * w), out(dt, n);
      for (std::int64_t i = 0; i < n * w; ++i) in.set(i, in_of(r, i, op));
      comm.reduce_scatter(in.p(), out.p(), n, dt, op, a.name)->wait();
      for (std::int64_t i = 0; i < n; ++i) bad += !same_value(out.get(i), reduce_at(r * n + i, op), dt);
      break;
    }
    case Collective::kAllToAll: {
      Buf in(dt, n * w), out(dt, n * w);
      for (std::int64_t i = 0; i < n * w; ++i) in.set(i, in_of(r, i, ReduceOp::kSum));
      comm.alltoall(in.p(), out.p(), n, dt, a.name)->wait();
      for (std::int64_t b = 0; b < w; ++b)
        for (std::int64_t j = 0; j < n; ++j) bad += out.get(b * n + j) != in_of(static_cast<int>(b), r * n + j, ReduceOp::kSum);
      break;
    }
    case Collective::kBarrier: break;
  }
  return bad;
}

// One random case on `comm` (a member's view), drawn from `gen` the same on every member.
void property_case(Communicator& comm, std::uint64_t seed, int c, std::mt19937_64& gen, const std::vector<int>& world_rank) {
  const int w = comm.size();
  std::vector<const algo::Algorithm*> all;
  for (const auto& a : algo::algorithms())
    if (a.collective != Collective::kBarrier) all.push_back(&a);
  const algo::Algorithm& a = *all[gen() % all.size()];
  const DataType dt = std::array{DataType::kF32, DataType::kF64, DataType::kI32, DataType::kI64}[gen() % 4];
  const bool integer = dt == DataType::kI32 || dt == DataType::kI64;
  const ReduceOp op = std::array{ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd}[gen() % 5];
  const std::int64_t n = std::array<std::int64_t, 6>{0, 1, static_cast<std::int64_t>(w), 7919,
                                                     static_cast<std::int64_t>(gen() % 64),
                                                     static_cast<std::int64_t>(gen() % 70000)}[gen() % 6];
  const int root = static_cast<int>(gen() % static_cast<std::uint64_t>(w));
  const bool in_place = gen() % 2 == 0;
  const std::string what = fmt_case(seed, c, a, dt, op, n, root, in_place, w);
  auto in_of = [&](int member, std::int64_t i, ReduceOp o) { return property_input(seed, c, world_rank[member], i, o); };
  auto reduce_at = [&](std::int64_t i, ReduceOp o) {
    std::vector<double> v;
    for (int m = 0; m < w; ++m) v.push_back(in_of(m, i, o));
    return property_reduce(v, o, integer);
  };
  std::int64_t bad = 0;
  // An algorithm may refuse a layout (hierarchical on uneven hosts): then every member must
  // refuse it, before any byte moves, and the communicator stays usable.
  std::int64_t refused = 0;
  try {
    bad = property_run(comm, a, dt, op, n, root, in_place, integer, in_of, reduce_at);
  } catch (const ConfigError&) {
    refused = 1;
  }
  std::int64_t all_refused = refused, any_refused = refused;
  comm.allreduce(&all_refused, 1, DataType::kI64, ReduceOp::kMin)->wait();
  comm.allreduce(&any_refused, 1, DataType::kI64, ReduceOp::kMax)->wait();
  g_refused += static_cast<int>(refused);
  expect(all_refused == any_refused, what + ": refused on some members only");
  expect(bad == 0, what + ": " + std::to_string(bad) + " wrong");
}


int run_properties() {
  auto world = Communicator::init();
  const std::uint64_t seed = std::getenv("CHECK_SEED") ? std::strtoull(std::getenv("CHECK_SEED"), nullptr, 10) : 1;
  const int cases = std::getenv("CHECK_CASES") ? std::atoi(std::getenv("CHECK_CASES")) : 150;
  const int W = world->size();
  for (int c = 0; c < cases; ++c) {
    std::mt19937_64 gen(seed * 1000003 + static_cast<std::uint64_t>(c));
    // One case in four runs on two sub-groups: a random split of the world, each part in a
    // random order (so group ranks differ from world ranks).
    std::vector<int> order(W);
    for (int i = 0; i < W; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), gen);
    const bool split = W >= 2 && gen() % 4 == 0;
    const int cut = split ? 1 + static_cast<int>(gen() % static_cast<std::uint64_t>(W - 1)) : W;
    const bool first_part = std::find(order.begin(), order.end(), world->rank()) - order.begin() < cut;
    const std::vector<int> members = first_part ? std::vector<int>(order.begin(), order.begin() + cut)
                                                : std::vector<int>(order.begin() + cut, order.end());
    if (!split) {
      std::vector<int> identity(W);
      for (int i = 0; i < W; ++i) identity[i] = i;
      property_case(*world, seed, c, gen, identity);
    } else {
      auto group = world->new_group(members);
      // Both parts draw from the same generator state: the case differs only by its members.
      property_case(*group, seed, c, gen, members);
    }
  }
  world->barrier()->wait();
  std::printf("rank %d of %d (%s): seed %llu, %d random cases (%d refused by their algorithm), %d checks, %d failures\n",
              world->rank(), W, world->transport().c_str(), static_cast<unsigned long long>(seed), cases, g_refused,
              g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

int run_collectives(bool fake_hosts) {
  auto comm = Communicator::init();
  check_collectives(*comm);
  check_reproducible_and_async(*comm);
  check_start(*comm);
  check_p2p_and_groups(*comm);
  check_mismatches_refused(*comm);
  std::printf("rank %d of %d (%s): %d checks, %d failures\n", comm->rank(), comm->size(), comm->transport().c_str(),
              g_checks, g_failures);
  (void)fake_hosts;
  return g_failures == 0 ? 0 : 1;
}

// Rank 1 dies (SIGKILL) or stalls (SIGSTOP) while all-reduces are running.
int run_kill(int sig) {
  // The launcher stops the other ranks when one dies; survivors ignore that here so that the
  // test sees them detect the death themselves.
  if (std::string(std::getenv("RANK")) != "1") ::signal(SIGTERM, SIG_IGN);
  auto comm = Communicator::init();
  std::vector<float> data(8 << 20, 1.0f);  // 32 MiB
  comm->barrier()->wait();
  if (comm->rank() == 1) {
    std::thread([sig] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      ::raise(sig);
    }).detach();
  }
  auto start = std::chrono::steady_clock::now();
  try {
    for (int i = 0; i < 1000; ++i) comm->allreduce(data.data(), static_cast<std::int64_t>(data.size()), DataType::kF32, ReduceOp::kSum)->wait();
    std::printf("rank %d: no error after 1000 all-reduces\n", comm->rank());
    return 1;
  } catch (const CommError& e) {
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("rank %d: CommError after %.2f s: op=%s peer=%d: %s\n", comm->rank(), s, e.op().c_str(), e.peer(), e.what());
    bool names_op = std::string(e.what()).find("allreduce") != std::string::npos && e.op() == "allreduce";
    return names_op && e.peer() >= 0 ? 3 : 1;  // 3: the expected failure
  }
}

// A late peer puts the others to sleep (wait_policy.h), and one that dies while they sleep
// is noticed as a death, not at the timeout:
//  1. the last rank comes 300 ms late to each of 3 all-reduces: the sums are right, and
//     every other rank slept in each (and paused or yielded far less than a 300 ms wait
//     polled throughout would: under 1,000,000 times in all, against tens of millions);
//  2. the last rank comes 300 ms late to a fourth and exits instead of joining: the others
//     fail with the rank's death or its closed connection, naming the op and the rank
//     (exit code 3), before the timeout.
int run_late() {
  if (std::string(std::getenv("RANK")) != "0") ::signal(SIGTERM, SIG_IGN);
  auto comm = Communicator::init();
  const int me = comm->rank(), world = comm->size(), late = world - 1;
  long slept = 0, spun = 0;
  for (int i = 0; i < 3; ++i) {
    std::vector<float> x(1024, static_cast<float>(me + 1));
    comm->barrier()->wait();
    const WaitCounts before = wait_counts();
    if (me == late) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    comm->allreduce(x.data(), static_cast<std::int64_t>(x.size()), DataType::kF32, ReduceOp::kSum)->wait();
    const WaitCounts after = wait_counts();
    expect(std::all_of(x.begin(), x.end(), [&](float v) { return v == static_cast<float>(world * (world + 1) / 2); }),
           "the late all-reduce's sum");
    if (me != late) {
      expect(after.sleeps > before.sleeps, "a rank waiting 300 ms for a late peer sleeps");
      slept += after.sleeps - before.sleeps;
      spun += (after.pauses - before.pauses) + (after.yields - before.yields);
    }
  }
  if (me != late) {
    expect(spun < 1000000, "paused or yielded " + std::to_string(spun) + " times in 3 waits of 300 ms");
    std::printf("rank %d: slept %ld times, paused or yielded %ld times in 3 all-reduces with a peer 300 ms late\n", me,
                slept, spun);
  }
  if (g_failures > 0) return 1;
  comm->barrier()->wait();
  if (me == late) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::_Exit(0);
  }
  std::vector<float> x(1024, 1.0f);
  try {
    comm->allreduce(x.data(), static_cast<std::int64_t>(x.size()), DataType::kF32, ReduceOp::kSum)->wait();
    std::printf("rank %d: the all-reduce finished without rank %d\n", me, late);
    return 1;
  } catch (const CommError& e) {
    std::printf("rank %d: CommError: op=%s peer=%d: %s\n", me, e.op().c_str(), e.peer(), e.what());
    return 3;
  }
}

int run_token() {
  ::signal(SIGTERM, SIG_IGN);
  if (std::getenv("RANK") && std::string(std::getenv("RANK")) == "1") {
    ::setenv("WEFT_JOB_TOKEN", "another-job-0123456789abcdef", 1);
  }
  try {
    auto comm = Communicator::init();
    std::printf("rank %d: joined despite the token mismatch\n", comm->rank());
    return 1;
  } catch (const CommError& e) {
    std::printf("rank %s: %s\n", std::getenv("RANK"), e.what());
    return 3;
  }
}

// Random bytes at the store and at the ranks' peer listeners while the job rendezvous:
// every such connection must be refused without disturbing the job.
int run_hostile() {
  int port = std::atoi(std::getenv("MASTER_PORT"));
  int world = std::atoi(std::getenv("WORLD_SIZE"));
  std::atomic<bool> stop{false};
  std::thread noise;
  auto junk_at = [](int p, std::mt19937& gen) {
    try {
      Socket s = connect_tcp("127.0.0.1", p, Deadline::in(0.2));
      std::string junk(static_cast<size_t>(1 + gen() % 4096), '\0');
      for (auto& ch : junk) ch = static_cast<char>(gen());
      write_all(s.fd(), junk.data(), junk.size(), Deadline::in(1.0));
      return true;
    } catch (const std::exception&) {
      return false;
    }
  };
  if (std::string(std::getenv("RANK")) == "0") {
    noise = std::thread([&] {
      std::mt19937 gen(7);
      for (int i = 0; i < 100 && !stop; ++i) junk_at(port, gen);
      // The peer listeners: their ports are in the store (this thread holds the token).
      try {
        StoreClient store("127.0.0.1", port, std::getenv("WEFT_JOB_TOKEN"), 0, 10.0);
        std::string session = store.get("session", 10.0).value_or("");
        for (int r = 1; r < world && !stop; ++r) {
          auto ep = store.get(session + "/world/ep/" + std::to_string(r), 10.0);
          if (!ep) continue;
          int peer_port = std::stoi(ep->substr(ep->find('|') + 1));
          for (int i = 0; i < 50 && junk_at(peer_port, gen); ++i) {
          }
        }
      } catch (const std::exception&) {
      }
    });
  }
  auto comm = Communicator::init();
  std::int64_t v = comm->rank() + 1;
  comm->allreduce(&v, 1, DataType::kI64, ReduceOp::kSum)->wait();
  stop = true;
  if (noise.joinable()) noise.join();
  std::int64_t want = static_cast<std::int64_t>(comm->size()) * (comm->size() + 1) / 2;
  std::printf("rank %d: all-reduce under hostile connections gave %lld (want %lld)\n", comm->rank(),
              static_cast<long long>(v), static_cast<long long>(want));
  return v == want ? 0 : 1;
}

// Runs known operations with WEFT_TRACE set, then checks the files every rank wrote.
int run_trace() {
  const char* dir = std::getenv("WEFT_TRACE");
  if (!dir) {
    std::fprintf(stderr, "trace mode needs WEFT_TRACE\n");
    return 1;
  }
  int w = 0, me = 0;
  {
    auto comm = Communicator::init();
    w = comm->size();
    me = comm->rank();
    std::vector<float> x(4096 * w, 1.0f), y(4096 * w);
    comm->allreduce(x.data(), 4096 * w, DataType::kF32, ReduceOp::kSum, "ring")->wait();
    comm->allgather(x.data(), y.data(), 4096, DataType::kF32, "ring")->wait();
    comm->isend(x.data(), 10, DataType::kF32, (me + 1) % w);
    comm->irecv(y.data(), 10, DataType::kF32, (me + w - 1) % w)->wait();
    comm->barrier()->wait();
  }
  // Rank 0's communicator waited for every rank to leave: all files are complete now.
  if (me != 0) return 0;
  for (int r = 0; r < w; ++r) {
    std::ifstream f(std::string(dir) + "/rank-" + std::to_string(r) + ".jsonl");
    std::string line;
    std::vector<nlohmann::json> records;
    while (std::getline(f, line)) records.push_back(nlohmann::json::parse(line));
    expect(records.size() == 5, "rank " + std::to_string(r) + " wrote 5 records, not " + std::to_string(records.size()));
    if (records.size() != 5) continue;
    const auto& ar = records[0];
    expect(ar["op"] == "allreduce" && ar["algorithm"] == "ring" && ar["bytes"] == 4096 * w * 4, "allreduce record");
    expect(ar["group_ranks"].size() == static_cast<size_t>(w) && ar["rank"] == r, "group and rank");
    expect(ar["end_us"].get<std::int64_t>() >= ar["start_us"].get<std::int64_t>(), "times ordered");
    std::int64_t sent = 0;
    for (const auto& step : ar["steps"])
      for (const auto& s : step) {
        sent += s["bytes"].get<std::int64_t>();
        expect(s["to"] == (r + 1) % w, "ring sends go to the right neighbour");
      }
    expect(sent == 2 * (w - 1) * 4096 * 4, "ring all-reduce sends 2(W-1)/W of the buffer: " + std::to_string(sent));
    expect(records[1]["op"] == "allgather" && records[2]["op"] == "send" && records[3]["op"] == "recv", "op order");
    expect(records[2]["peers"][0] == (r + 1) % w && records[2]["bytes"] == 40, "send record");
  }
  std::printf("rank %d: trace checks: %d, failures %d\n", me, g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines reach the launcher even if we are killed
  std::string mode = argc > 1 ? argv[1] : "collectives";
  if (const char* hosts = std::getenv("CHECK_FAKE_HOSTS")) {
    int h = std::atoi(hosts), w = std::atoi(std::getenv("WORLD_SIZE")), r = std::atoi(std::getenv("RANK"));
    ::setenv("WEFT_HOST_ID", std::to_string(r / std::max(1, w / h)).c_str(), 1);
  }
  try {
    if (mode == "collectives") return run_collectives(std::getenv("CHECK_FAKE_HOSTS") != nullptr);
    if (mode == "kill") return run_kill(SIGKILL);
    if (mode == "stall") return run_kill(SIGSTOP);
    if (mode == "token") return run_token();
    if (mode == "hostile") return run_hostile();
    if (mode == "trace") return run_trace();
    if (mode == "properties") return run_properties();
    if (mode == "late") return run_late();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
