// Packets of the simulated fabric and the pool they come from. A packet is a small plain
// struct addressed by a 32-bit index; the pool reuses freed slots, so a run allocates
// only while its peak number of packets in flight grows.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "weft/sim/engine.h"
#include "weft/sim/huge_pages.h"

namespace weft::sim {

enum class PacketType : std::uint8_t { kData, kAck, kNak, kCnp, kPause };
// RDMA WRITE opcodes (InfiniBand BTH): First/Middle/Last of a multi-packet write, or Only.
enum class Opcode : std::uint8_t { kFirst, kMiddle, kLast, kOnly };

// Frame sizes in bytes. RoCEv2 data: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 (+ RETH 16 on
// First and Only) + payload + ICRC 4 + FCS 4. Acks add AETH 4; a CNP carries 16 reserved
// bytes; a PFC frame is a 64-byte MAC control frame. On the wire each frame also takes a
// preamble (8) and an inter-frame gap (12).
constexpr std::uint32_t kHeaderBytes = 14 + 20 + 8 + 12 + 4 + 4;
constexpr std::uint32_t kRethBytes = 16;
constexpr std::uint32_t kWireOverhead = 8 + 12;
// A cut-through switch forwards a frame once this much of it is in: a minimum frame, which
// holds the Ethernet, IP, UDP and BTH headers its routing reads.
constexpr std::uint32_t kCutThroughBytes = 64;
constexpr std::uint32_t kAckFrame = kHeaderBytes + 4;
constexpr std::uint32_t kCnpFrame = kHeaderBytes + 16;
constexpr std::uint32_t kPauseFrame = 64;
constexpr std::uint16_t kRocePort = 4791;

// The time a frame of `frame` bytes (preamble and gap added here) takes on a link of `bps`.
inline Time serialization(std::int64_t frame, double bps) {
  return static_cast<Time>(std::llround(static_cast<double>(frame + kWireOverhead) * 8e12 / bps));
}

// The time from a frame's first bit on a link of `bps` to its first kCutThroughBytes at the
// far end (the preamble first; propagation not included).
inline Time cut_through_time(double bps) {
  return static_cast<Time>(std::llround(static_cast<double>(8 + kCutThroughBytes) * 8e12 / bps));
}

struct alignas(64) Packet {  // one cache line
  PacketType type = PacketType::kData;
  Opcode opcode = Opcode::kOnly;
  std::uint8_t queue = 0;    // priority queue (from DSCP)
  std::uint8_t dscp = 0;
  bool ect : 1 = false;          // ECN-capable transport
  bool ce : 1 = false;           // congestion experienced
  bool in_headroom : 1 = false;  // held in its ingress port's PFC headroom, not the shared buffer
  bool trimmed : 1 = false;      // data: its payload was cut by a switch (packet trimming); NAK: answers one
  bool ecn_echo : 1 = false;     // ACK: the packet it answers arrived CE-marked
  std::uint16_t sport = 0;   // UDP source port (QP entropy)
  std::int32_t src = -1;     // GPU node ids
  std::int32_t dst = -1;
  std::uint32_t qp = 0;
  std::uint32_t psn = 0;     // data: PSN; ACK/NAK: expected PSN; pause: quanta
  std::uint32_t payload = 0;
  std::uint32_t frame = 0;   // frame bytes (without preamble and gap)
  std::int32_t port = -1;    // the port it arrived on at the current node (-1: generated here)
  std::uint32_t msn = 0;     // ACK/NAK: messages the responder completed on the QP (AETH MSN)
  Time sent_at = 0;
  std::uint32_t link_epoch = 0;  // the link's epoch when it went on the wire (failures)
  std::uint32_t nacked_psn = 0;  // NAK of a trimmed packet: its PSN (psn is still the cumulative ACK)
  std::uint32_t next = 0;        // the packet behind it in its port's queue (PacketList)
};
static_assert(sizeof(Packet) == 64);

// In-band network telemetry (HPCC): what each switch egress port a data packet left
// through said about itself, echoed back to the sender in ACKs.
struct IntHop {
  double bps = 0;              // the port's speed
  Time ts = 0;                 // when the packet left
  std::int64_t tx_bytes = 0;   // bytes the port had sent by then
  std::int64_t qlen = 0;       // bytes queued behind it in its class
};
constexpr int kMaxIntHops = 8;
constexpr std::uint32_t kIntBytes = 42;  // HPCC's INT header and five hops' records on the wire
struct IntStack {
  IntHop hop[kMaxIntHops];
  int n = 0;
};

// Packets by id, in stores: one per thread of the parallel engine (and one for the events
// between its windows). A thread allocates from its own free list, else a new slot of its
// own store; a packet released by any thread goes onto that thread's free list. A store
// grows by segments of 32,768 packets (2 MiB, in huge pages) whose addresses never change,
// listed in a directory made at its full size, so one thread reads a packet another made
// while that one goes on growing its store. An id is its store's number over the slot's,
// and id / 32,768 is the segment's place in the directory. With telemetry on, each slot
// also holds an IntStack.
class PacketPool {
 public:
  static constexpr int kSlotBits = 26;  // 67 million packets a store
  static constexpr std::uint32_t kSlotMask = (1u << kSlotBits) - 1;
  static constexpr int kMaxStores = 1 << (32 - kSlotBits);

  explicit PacketPool(int stores = 1, bool telemetry = false) { reset(stores, telemetry); }
  void reset(int stores, bool telemetry) {
    stores_.clear();
    stores_.resize(static_cast<std::size_t>(stores));
    const std::size_t dir = static_cast<std::size_t>(stores) << (kSlotBits - kSegmentBits);
    packets_ = std::make_unique<Packet*[]>(dir);
    stacks_ = telemetry ? std::make_unique<IntStack*[]>(dir) : nullptr;
  }
  std::uint32_t alloc(int store) {
    Store& s = stores_[static_cast<std::size_t>(store)];
    if (s.free.empty()) return grow(store);
    const std::uint32_t id = s.free.back();
    s.free.pop_back();
    (*this)[id] = Packet{};
    return id;
  }
  void release(int store, std::uint32_t id) { stores_[static_cast<std::size_t>(store)].free.push_back(id); }
  Packet& operator[](std::uint32_t id) { return packets_[id >> kSegmentBits][id & kSegmentMask]; }
  const Packet& at(std::uint32_t id) const { return packets_[id >> kSegmentBits][id & kSegmentMask]; }
  IntStack& telemetry(std::uint32_t id) { return stacks_[id >> kSegmentBits][id & kSegmentMask]; }
  // Slots ever made, and packets alive (made and not released); only while no thread runs.
  std::size_t capacity() const {
    std::size_t n = 0;
    for (const Store& s : stores_) n += s.size;
    return n;
  }
  std::size_t in_use() const {
    std::size_t n = capacity();
    for (const Store& s : stores_) n -= s.free.size();
    return n;
  }

 private:
  static constexpr int kSegmentBits = 15;  // 2 MiB of packets a segment, in huge pages
  static constexpr std::uint32_t kSegmentMask = (1u << kSegmentBits) - 1;
  struct ReleaseHuge {
    void operator()(void* p) const noexcept { release_huge(p); }
  };
  template <class T>
  static std::unique_ptr<T[], ReleaseHuge> segment() {
    void* raw = allocate_huge(sizeof(T) << kSegmentBits);
    static_assert(std::is_trivially_destructible_v<T>);  // released without destructors
    T* first = static_cast<T*>(raw);
    std::uninitialized_value_construct_n(first, std::size_t{1} << kSegmentBits);
    return std::unique_ptr<T[], ReleaseHuge>(first);
  }
  struct Store {
    std::vector<std::unique_ptr<Packet[], ReleaseHuge>> packets;  // its segments (owned; the directory points into them)
    std::vector<std::unique_ptr<IntStack[], ReleaseHuge>> stacks;
    std::uint32_t size = 0;
    std::vector<std::uint32_t> free;
  };
  std::uint32_t grow(int store) {
    Store& s = stores_[static_cast<std::size_t>(store)];
    if (s.size > kSlotMask) throw std::length_error("simulator: more than 67 million packets alive on one thread");
    const std::uint32_t id = static_cast<std::uint32_t>(store) << kSlotBits | s.size++;
    if ((id & kSegmentMask) == 0) {
      s.packets.push_back(segment<Packet>());
      packets_[id >> kSegmentBits] = s.packets.back().get();
      if (stacks_) {
        s.stacks.push_back(segment<IntStack>());
        stacks_[id >> kSegmentBits] = s.stacks.back().get();
      }
    }
    return id;
  }
  std::vector<Store> stores_;
  std::unique_ptr<Packet*[]> packets_;    // the directory: segment pointers by id / 32,768
  std::unique_ptr<IntStack*[]> stacks_;
};

// A FIFO of packets linked through their `next` (a packet waits in one list at a time): no
// storage of its own, so taking the head reads only the packet that leaves, and adding one
// writes only the packet before it.
class PacketList {
 public:
  bool empty() const { return size_ == 0; }
  std::uint32_t size() const { return size_; }
  std::uint32_t front() const { return head_; }  // size() > 0
  void push(PacketPool& pool, std::uint32_t id) {
    if (size_ == 0) head_ = id;
    else pool[tail_].next = id;
    tail_ = id;
    ++size_;
  }
  std::uint32_t pop(const PacketPool& pool) {  // size() > 0
    const std::uint32_t id = head_;
    head_ = pool.at(id).next;
    --size_;
    return id;
  }
  // f(id) for each packet, front first.
  template <class F>
  void for_each(const PacketPool& pool, F f) const {
    std::uint32_t id = head_;
    for (std::uint32_t n = 0; n < size_; ++n, id = pool.at(id).next) f(id);
  }

 private:
  std::uint32_t head_ = 0, tail_ = 0, size_ = 0;
};

// A FIFO of packet ids that reuses its storage (a ring buffer that doubles when full).
class PacketFifo {
 public:
  bool empty() const { return size_ == 0; }
  std::size_t size() const { return size_; }
  std::uint32_t front() const { return buf_[head_]; }
  std::uint32_t at(std::size_t i) const { return buf_[(head_ + i) & (buf_.size() - 1)]; }  // i < size()
  void push(std::uint32_t id) {
    if (size_ == buf_.size()) grow();
    buf_[(head_ + size_) & (buf_.size() - 1)] = id;
    ++size_;
  }
  std::uint32_t pop() {
    std::uint32_t id = buf_[head_];
    head_ = (head_ + 1) & (buf_.size() - 1);
    --size_;
    return id;
  }

 private:
  void grow() {
    std::vector<std::uint32_t> bigger(buf_.empty() ? 8 : buf_.size() * 2);
    for (std::size_t i = 0; i < size_; ++i) bigger[i] = buf_[(head_ + i) & (buf_.size() - 1)];
    buf_.swap(bigger);
    head_ = 0;
  }
  std::vector<std::uint32_t> buf_;
  std::uint32_t head_ = 0, size_ = 0;
};

}  // namespace weft::sim
