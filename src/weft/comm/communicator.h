// Communicator: a group of ranks and the collectives and point-to-point operations
// among them, in the spirit of PyTorch's ProcessGroup.
//
// Every operation is asynchronous: it returns a Work handle at once and runs in the order
// it was issued (all ranks must issue the same collectives in the same order). wait()
// blocks until it is done and rethrows its CommError; buffers must stay alive until then.
// An operation runs on the thread that waits for it (no hand-off: the common case of
// waiting at once costs no thread switch), or, once started (Work::start() or test()), on
// the communicator's own thread while the caller does other work, as DDP overlaps its
// gradient all-reduces with the backward pass. Like a non-blocking MPI operation, one
// that is neither waited for nor started does not progress. Results are bitwise reproducible for a
// given algorithm and world: every algorithm combines each element in a fixed order.
//
//   auto comm = Communicator::init();          // rendezvous through MASTER_ADDR:MASTER_PORT
//   comm->allreduce(grads, n, DataType::kF32, ReduceOp::kAvg)->wait();
//   auto tp = comm->new_group({0, 1});          // sub-groups for tensor/pipeline/data meshes
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "weft/algo/program.h"
#include "weft/comm/operation_queue.h"
#include "weft/comm/process.h"
#include "weft/comm/reduce.h"
#include "weft/comm/wait_policy.h"
#include "weft/util/error.h"

namespace weft::comm {

class StoreServer;
class Communicator;
namespace mpi {
class Group;
}
class StoreClient;
class Tracer;
struct GroupLinks;


struct CommOptions {
  double timeout_s = 60.0;          // WEFT_COMM_TIMEOUT: no progress this long fails an operation
  double rendezvous_timeout_s = 60; // WEFT_RENDEZVOUS_TIMEOUT
  std::string transport = "auto";   // WEFT_TRANSPORT: auto (shm on one host, tcp across), shm, tcp, mpi
  std::size_t shm_ring_bytes = 1 << 20;  // WEFT_SHM_RING_BYTES (1 MiB measured best: it stays in cache)
  std::string trace_dir;            // WEFT_TRACE
  bool tls = false;                 // WEFT_TLS=1: TCP data links under TLS (tls.h)
  // WEFT_STRIPE: off | shm+tcp | tcp:N (2-8): more paths to a peer, a large message split
  // over them by their measured bandwidths (links.h); WEFT_STRIPE_SHARES: the shares
  // instead ("3:1"); WEFT_STRIPE_MIN: the smallest message split (bytes, default 1 MiB).
  std::string stripe = "off";
  std::vector<double> stripe_shares;
  std::vector<std::string> stripe_addresses;  // WEFT_STRIPE_ADDRS: this rank's, for the 2nd, 3rd, ... connection
  std::uint64_t stripe_min = 1 << 20;
  // How a waiting rank spends its core (wait_policy.h): WEFT_SPIN_US, the most it pauses
  // (microseconds, default 200); WEFT_YIELD_US, how long it yields when the job's ranks
  // outnumber the cores (default 2000).
  WaitSettings wait;
  static CommOptions from_env();
};

// A rendezvous through another program's store (the torch.distributed backend's: PyTorch's
// store, which every rank already reached): rank 0 serves weft's store on a free port and
// publishes where it is, with the job's token (WEFT_JOB_TOKEN, or one rank 0 makes); the
// other ranks look it up, waiting as long as `lookup` waits. The token is then as secret as
// that store is.
struct ExternalRendezvous {
  std::function<void(const std::string& value)> publish;
  std::function<std::string()> lookup;
};

class Communicator : public std::enable_shared_from_this<Communicator> {
 public:
  // Joins the job described by the environment (process.h) and connects to every rank.
  // Throws CommError naming missing ranks when the rendezvous times out.
  static std::shared_ptr<Communicator> init(const ProcessInfo& info, const CommOptions& options);
  static std::shared_ptr<Communicator> init();  // from the environment
  static std::shared_ptr<Communicator> init(const ProcessInfo& info, const CommOptions& options,
                                            const ExternalRendezvous& via);
  // A group whose ranks meet under `session` in a store another process keeps (a live
  // elastic job's generations, membership.h), proving `token` on their links.
  static std::shared_ptr<Communicator> init(const ProcessInfo& info, const CommOptions& options,
                                            std::shared_ptr<StoreClient> store, const std::string& token,
                                            const std::string& session);
  ~Communicator();

  int rank() const { return rank_; }           // in this group
  int size() const { return static_cast<int>(members_.size()); }
  int global_rank() const { return members_[rank_]; }
  const std::vector<int>& members() const { return members_; }  // global ranks
  const std::string& name() const { return name_; }
  // "shm", "tcp" or "mixed": what the links of this group use.
  std::string transport() const;

  // Collectives. `count` is the number of elements per rank; `algorithm` empty picks by
  // the selection table (or WEFT_<COLLECTIVE>_ALGO). In-place when in == out.
  WorkPtr allreduce(const void* in, void* out, std::int64_t count, DataType t, ReduceOp op,
                    const std::string& algorithm = "");
  WorkPtr allreduce(void* data, std::int64_t count, DataType t, ReduceOp op, const std::string& algorithm = "") {
    return allreduce(data, data, count, t, op, algorithm);
  }
  WorkPtr broadcast(void* data, std::int64_t count, DataType t, int root, const std::string& algorithm = "");
  WorkPtr reduce(const void* in, void* out, std::int64_t count, DataType t, ReduceOp op, int root,
                 const std::string& algorithm = "");
  // out: size() * count elements (at the root only, for gather).
  WorkPtr gather(const void* in, void* out, std::int64_t count, DataType t, int root, const std::string& algorithm = "");
  WorkPtr scatter(const void* in, void* out, std::int64_t count, DataType t, int root,
                  const std::string& algorithm = "");
  WorkPtr allgather(const void* in, void* out, std::int64_t count, DataType t, const std::string& algorithm = "");
  // in: size() * count elements; out: count elements (block `rank()` of the reduction).
  WorkPtr reduce_scatter(const void* in, void* out, std::int64_t count, DataType t, ReduceOp op,
                         const std::string& algorithm = "");
  // in and out: size() * count elements; block j of in goes to rank j.
  WorkPtr alltoall(const void* in, void* out, std::int64_t count, DataType t, const std::string& algorithm = "");
  WorkPtr barrier();

  // Point to point. The isend/irecv calls issued before the next wait() (or test(), or
  // collective) run together as one step, so exchanges with neighbours cannot deadlock.
  WorkPtr isend(const void* data, std::int64_t count, DataType t, int peer);
  WorkPtr irecv(void* data, std::int64_t count, DataType t, int peer);
  void send(const void* data, std::int64_t count, DataType t, int peer) { isend(data, count, t, peer)->wait(); }
  void recv(void* data, std::int64_t count, DataType t, int peer) { irecv(data, count, t, peer)->wait(); }

  // A communicator over some of this group's ranks (ranks of this group, in the new
  // group's order). Every member must call it, in the same order as its other calls.
  std::shared_ptr<Communicator> new_group(const std::vector<int>& ranks);

  // With WEFT_TRACE: marks the start of an iteration in this rank's trace (trace.h).
  void trace_mark(const std::string& name);

  // The algorithm the selection table picks (after environment overrides).
  std::string choose_algorithm(algo::Collective c, std::int64_t bytes) const;

 private:
  using Task = Operation;
  Communicator() = default;
  void start_queue();
  WorkPtr submit(std::shared_ptr<Task> task);
  // Runs one batch of the queue: a collective, or point-to-point operations together.
  void run_batch(std::vector<std::shared_ptr<Task>>& batch);
  void run(Task& task);
  void run_p2p_batch(std::vector<std::shared_ptr<Task>>& batch);
  void connect_group(const std::string& prefix);
  // Throws ConfigError for an unknown algorithm (or "mpi" without the MPI transport).
  void check_algorithm(algo::Collective c, const std::string& algorithm) const;
  void run_mpi_native(Task& t);
  // The program of a collective on this rank, built once per distinct call.
  const algo::Program& cached_program(algo::Collective c, const std::string& algorithm, std::int64_t n,
                                      const algo::Options& opts);
  using ProgramKey = std::tuple<int, std::string, std::int64_t, decltype(algo::Options{}.fields())>;
  std::map<ProgramKey, algo::Program> programs_;  // used by the one running batch only
  // The running batch's scratch and input copy, kept from one call to the next: a fresh
  // allocation per call cost page faults (a 4 MiB all-reduce in PyTorch ran at a fifth of
  // its bandwidth when its buffers came back to the system between calls).
  std::vector<std::uint8_t> scratch_, temp_;

  int rank_ = 0;
  std::vector<int> members_;  // global ranks
  std::string name_ = "world";
  ProcessInfo info_;
  CommOptions options_;
  std::string token_;
  std::string session_;
  std::shared_ptr<StoreServer> server_;
  std::shared_ptr<StoreClient> store_;
  std::shared_ptr<Tracer> tracer_;
  std::unique_ptr<GroupLinks> links_;
  std::shared_ptr<mpi::Group> mpi_group_;  // set when the transport is MPI
  std::map<std::string, int> groups_made_;

  std::atomic<bool> healthy_{false};  // fully connected, and no operation has failed
  std::mutex failure_mu_;
  std::string failure_;  // the first failed operation's error
  std::unique_ptr<OperationQueue> ops_;  // last: its thread stops first
};

}  // namespace weft::comm
