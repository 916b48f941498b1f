// A one-way-per-direction byte pipe to one peer, with non-blocking operations. The
// executor moves messages through channels in pieces, so sends, receives and reductions
// of one step overlap (large messages are segmented and pipelined).
//
//   TcpChannel  a TCP connection (TCP_NODELAY, non-blocking), between hosts
//   ShmChannel  two single-producer single-consumer rings in POSIX shared memory, on one
//               host: the sender copies into the ring, the receiver copies or reduces
//               straight out of it
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "weft/comm/socket.h"

namespace weft::comm {

using Consumer = std::function<void(const std::uint8_t* bytes, std::size_t n)>;

class Channel {
 public:
  virtual ~Channel() = default;
  // Each copies at most n bytes and returns how many (0 when it would block). They throw
  // CommError when the peer is gone.
  virtual std::size_t write_some(const void* data, std::size_t n) = 0;
  virtual std::size_t read_some(void* data, std::size_t n) = 0;
  // Hands at most n available bytes to `consume` (in place when the transport allows).
  virtual std::size_t consume_some(std::size_t n, const Consumer& consume) = 0;
  virtual int fd() const { return -1; }  // a descriptor to poll, for TCP
  virtual const char* kind() const = 0;
  // This side gave up on the channel (an operation failed): the peer's waits on it fail at
  // once instead of at their timeout.
  virtual void abort() {}
};

class TcpChannel : public Channel {
 public:
  explicit TcpChannel(Socket s);
  std::size_t write_some(const void* data, std::size_t n) override;
  std::size_t read_some(void* data, std::size_t n) override;
  std::size_t consume_some(std::size_t n, const Consumer& consume) override;
  int fd() const override { return socket_.fd(); }
  const char* kind() const override { return "tcp"; }
  void abort() override;

 private:
  Socket socket_;
  std::unique_ptr<std::uint8_t[]> staging_;
};

// --- shared memory ---

// Wakes a sleeping rank. One per rank, in that rank's shared segment.
struct alignas(64) Doorbell {
  std::atomic<std::uint32_t> seq{0};
  std::atomic<std::uint32_t> sleeping{0};  // threads of the rank asleep on it (a rank may run groups on several)
  void ring();
  // Sleeps until rung or the timeout passes, unless `seq` already moved past `seen`.
  void wait(std::uint32_t seen, int timeout_us);
};

struct alignas(64) RingHeader {
  alignas(64) std::atomic<std::uint64_t> head{0};  // bytes written, by the sender
  alignas(64) std::atomic<std::uint64_t> tail{0};  // bytes consumed, by the receiver
  alignas(64) std::atomic<std::uint32_t> aborted{0};  // either side gave up (ShmChannel::abort)
};

// A rank's segment: its doorbell, its pid, and one incoming ring per local peer.
class ShmSegment {
 public:
  // Creates (owner) or opens (peer) "/weft-<name>".
  static std::unique_ptr<ShmSegment> create(const std::string& name, int slots, std::size_t ring_bytes);
  static std::unique_ptr<ShmSegment> open(const std::string& name);
  ~ShmSegment();
  // Faults in (a peer's view of) the header and ring `slot`: the part this process writes.
  void populate_slot(int slot);
  void unlink();
  Doorbell& doorbell();
  int owner_pid() const;
  RingHeader& ring(int slot);
  std::uint8_t* ring_data(int slot);
  std::size_t ring_bytes() const { return ring_bytes_; }

 private:
  ShmSegment() = default;
  std::string name_;
  void* base_ = nullptr;
  std::size_t size_ = 0;
  std::size_t ring_bytes_ = 0;
  bool owner_ = false;
};

class ShmChannel : public Channel {
 public:
  // out: my ring in the peer's segment; in: the peer's ring in my segment. The doorbells
  // are rung after progress the other side may be waiting for.
  ShmChannel(RingHeader& out, std::uint8_t* out_data, RingHeader& in, std::uint8_t* in_data, std::size_t ring_bytes,
             Doorbell& peer_bell, int peer_pid);
  std::size_t write_some(const void* data, std::size_t n) override;
  std::size_t read_some(void* data, std::size_t n) override;
  std::size_t consume_some(std::size_t n, const Consumer& consume) override;
  const char* kind() const override { return "shm"; }
  void abort() override;
  int peer_pid() const { return peer_pid_; }

 private:
  RingHeader& out_;
  std::uint8_t* out_data_;
  RingHeader& in_;
  std::uint8_t* in_data_;
  std::size_t cap_;
  Doorbell& peer_bell_;
  int peer_pid_;
};

}  // namespace weft::comm
