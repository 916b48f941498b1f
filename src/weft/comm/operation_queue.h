// The operations of one communicator, in the order they were issued (c10d's Work and its
// process group's queue). An operation runs on the thread that waits for it (with those
// issued before it, in order), or, once started, on the queue's own thread, so that it
// progresses while the caller computes: DDP starts each bucket's all-reduce during the
// backward pass. Like a non-blocking MPI operation, one neither waited for nor started does
// not progress. Point-to-point operations issued back to back run together as one step,
// once someone waits for one of them or a collective follows them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "weft/algo/program.h"
#include "weft/comm/reduce.h"

namespace weft::comm {

class OperationQueue;

class Work {
 public:
  // Rethrows the operation's CommError. The waiting thread runs the operation itself (and
  // those issued before it) unless the communicator's thread already has.
  void wait();
  // Hands the operation (and those before it) to the communicator's thread, so that it
  // progresses while this thread does something else.
  void start();
  bool test();  // starts it; true when finished (successfully or not)
  bool failed();
  // When the operation finished (valid once test() is true), for timelines.
  std::chrono::steady_clock::time_point finished_at();
  // Calls `callback` with the operation's error (null on success) once it finishes, on the
  // thread that finishes it (at once, on this thread, if it already has): futures built on
  // Work (the torch.distributed backend's) complete through it. It must not wait for
  // operations of the same communicator.
  void on_finish(std::function<void(std::exception_ptr)> callback);

 private:
  friend class OperationQueue;
  void finish(std::exception_ptr error);
  OperationQueue* owner_ = nullptr;
  bool p2p_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
  std::chrono::steady_clock::time_point finished_at_;
  std::vector<std::function<void(std::exception_ptr)>> callbacks_;
};
using WorkPtr = std::shared_ptr<Work>;

// One operation: a collective on a group's buffers, or one side of a point-to-point message.
struct Operation {
  enum Kind { kCollective, kSend, kRecv } kind = kCollective;
  algo::Collective collective = algo::Collective::kAllReduce;
  std::string algorithm;
  const void* in = nullptr;
  void* out = nullptr;
  std::int64_t count = 0;
  DataType dtype = DataType::kF32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  int peer = -1;
  WorkPtr work = std::make_shared<Work>();
};

class OperationQueue {
 public:
  // Runs a batch (one collective, or point-to-point operations together); throws on failure.
  using Runner = std::function<void(std::vector<std::shared_ptr<Operation>>& batch)>;
  explicit OperationQueue(Runner run);
  // Runs what is left, then stops the queue's thread.
  ~OperationQueue();
  OperationQueue(const OperationQueue&) = delete;
  OperationQueue& operator=(const OperationQueue&) = delete;

  WorkPtr submit(std::shared_ptr<Operation> operation);

 private:
  friend class Work;
  // Runs batches on the calling thread, in order, until `work` has run.
  void drive(Work* work);
  void start(bool p2p);
  void worker();
  // Takes the next operation (and the point-to-point ones right after it) off the queue.
  std::vector<std::shared_ptr<Operation>> take_batch();
  void run_batch(std::vector<std::shared_ptr<Operation>>& batch);
  bool ready_locked() const;  // the next batch may run (mu_ held)

  Runner run_;
  std::mutex mu_;
  std::condition_variable cv_;       // the worker waits here for started work
  std::condition_variable idle_cv_;  // waiting threads wait here for the running batch
  std::deque<std::shared_ptr<Operation>> queue_;
  bool running_ = false;  // a batch is executing (on the worker or on a waiting thread)
  bool started_ = false;  // the worker may run what is queued (until the queue empties)
  bool p2p_demanded_ = false;  // a waited or polled point-to-point operation is queued
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace weft::comm
