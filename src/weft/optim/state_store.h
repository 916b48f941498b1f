// Where an optimizer keeps its buffers (momentum, Adam's two moments): KINDS buffers per
// parameter, each shaped like it, zero at the start. (The parameters themselves, offloaded,
// live in one too: parallel/param_offload.h.)
//
// In memory, or offloaded (seed 003 chapter 8; ZeRO-Offload): the buffers live in a file in
// a folder given, and only SLOTS parameters' worth of them are in memory at once. An update
// walks the parameters in order; a background thread reads the buffers of the parameters
// ahead into free slots while the current one is updated, and writes each back once it is
// released (double-buffered, asynchronous reads and writes), so that the update seldom
// waits for the disk. The file is removed when the store goes.
//
//   begin_pass(order)             the reads of the first parameters start (in `order`, or
//                                 0, 1, 2, ...: a pass acquires them in that order)
//   Tensor* b = acquire(k)        parameter k's KINDS buffers, in memory (waits for the read)
//   release(k)                    done with them: written back in the background
//   end_pass()                    every write done
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "weft/tensor/tensor.h"

namespace weft {

class StateStore {
 public:
  StateStore() = default;
  // In memory: `kinds` zero buffers shaped and typed like each of `like`.
  StateStore(const std::vector<Tensor>& like, int kinds);
  // The same for buffers of these shapes, all of `dtype`.
  StateStore(const std::vector<Shape>& shapes, DType dtype, int kinds);
  ~StateStore();
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;
  StateStore(StateStore&&) = delete;

  // Moves the buffers to a new file in `dir` ("weft-<what>-..."), keeping `slots` (at least
  // 2) parameters' buffers in memory. Throws Error when the file cannot be made or written.
  void offload(const std::string& dir, int slots = 3, const std::string& what = "optimizer");
  // The bytes of buffers in memory now (all of them, or the slots').
  std::int64_t resident_bytes() const;
  // The bytes of all the buffers.
  std::int64_t total_bytes() const { return total_bytes_; }
  // The bytes of the largest parameter's buffers (what one slot holds).
  std::int64_t largest_bytes() const { return largest_bytes_; }
  const Shape& shape(std::size_t k) const { return shapes_.at(k); }
  std::size_t size() const { return shapes_.size(); }

  void begin_pass(std::vector<std::size_t> order = {});
  Tensor* acquire(std::size_t k);
  // `changed` false: the buffers are as read, and the slot is free at once (no write).
  void release(std::size_t k, bool changed = true);
  void end_pass();

  // Offloaded, between passes: the slots' memory goes (read and write still work; the next
  // pass makes them again).
  void release_memory();

  // A copy of one buffer, and a buffer set from a tensor of its shape (checkpoints).
  Tensor read(std::size_t k, int kind) const;
  void write(std::size_t k, int kind, const Tensor& value);

 private:
  struct Slot {
    std::vector<Tensor> flat;  // one per kind, the largest parameter's size
    std::vector<Tensor> views; // shaped like parameter `param`
    long param = -1;
    enum State { kFree, kReading, kReady, kInUse, kWriting } state = kFree;
  };
  struct Io {
    bool write;
    std::size_t slot;
  };
  std::int64_t offset(std::size_t k, int kind) const { return offsets_[k * static_cast<std::size_t>(kinds_) + kind]; }
  void request_reads();  // (with mu_ held) reads of the next parameters into free slots
  void io_loop();
  void transfer(Slot& s, bool write) const;

  int kinds_ = 0;
  std::vector<Shape> shapes_;
  std::vector<DType> dtypes_;
  Tensor& held(std::size_t k, int kind) const;
  mutable std::vector<Tensor> memory_;  // in memory: kinds per parameter (made on first use)
  std::int64_t total_bytes_ = 0, largest_bytes_ = 0;

  // Offloaded.
  int fd_ = -1;
  std::string path_, what_ = "optimizer";
  bool shrunk_ = false;  // release_memory emptied the slots
  std::vector<std::int64_t> offsets_;
  std::vector<Slot> slots_;
  std::vector<std::size_t> order_;    // the pass's order of parameters
  std::vector<std::size_t> place_;    // each parameter's place in it
  std::size_t next_read_ = 0;  // the place of the next parameter to read ahead
  std::deque<Io> queue_;
  bool stop_ = false;
  std::string error_;          // the I/O thread's failure, rethrown by the caller
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::thread io_;
};

}  // namespace weft
