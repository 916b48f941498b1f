// Virtual output queues of one switch egress port's traffic class (queuing=voq): a FIFO per
// ingress port of the switch, holding the packets that came in through it for this egress,
// served round robin one packet at a time, as the output arbiter of an input-queued
// switch's scheduler (iSLIP and the credit schedulers of VOQ switches) grants its inputs in
// turn. The switch's internal fabric is taken to be fast enough that an ingress port never
// holds an egress port back (the usual speed-up). Each queue counts its bytes, which a
// switch marks ECN on. Packets are ids of the simulator's packet pool.
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

#include "weft/sim/packet.h"

namespace weft::sim {

class VirtualOutputQueues {
 public:
  // One queue per input; inputs are numbered 0..inputs-1 by the caller.
  void resize(int inputs) {
    fifo_.resize(static_cast<std::size_t>(inputs));
    bytes_.assign(static_cast<std::size_t>(inputs), 0);
    waiting_.assign((static_cast<std::size_t>(inputs) + 63) / 64, 0);
  }
  int inputs() const { return static_cast<int>(fifo_.size()); }
  bool empty() const { return packets_ == 0; }
  bool empty(int input) const { return fifo_[static_cast<std::size_t>(input)].empty(); }
  std::int64_t bytes(int input) const { return bytes_[static_cast<std::size_t>(input)]; }
  // The packets of one input, oldest first (i < size(input)).
  std::size_t size(int input) const { return fifo_[static_cast<std::size_t>(input)].size(); }
  std::uint32_t at(int input, std::size_t i) const { return fifo_[static_cast<std::size_t>(input)].at(i); }

  void push(int input, std::uint32_t id, std::int64_t bytes) {
    fifo_[static_cast<std::size_t>(input)].push(id);
    bytes_[static_cast<std::size_t>(input)] += bytes;
    waiting_[static_cast<std::size_t>(input) / 64] |= std::uint64_t{1} << (input % 64);
    ++packets_;
  }
  // The input served next: the first non-empty one from the turn on. Requires !empty().
  int next_input() const {
    const std::size_t words = waiting_.size(), first = static_cast<std::size_t>(turn_) / 64;
    // The turn's word from the turn on, the other words in order, then the turn's word
    // before the turn.
    std::uint64_t w = waiting_[first] & (~std::uint64_t{0} << (turn_ % 64));
    for (std::size_t k = 0; k <= words; ++k) {
      const std::size_t at = (first + k) % words;
      if (k > 0) w = waiting_[at];
      if (w != 0) return static_cast<int>(at * 64) + std::countr_zero(w);
    }
    return -1;  // empty (not reached when the caller keeps the contract)
  }
  // The packet served next. Requires !empty().
  std::uint32_t front() const { return fifo_[static_cast<std::size_t>(next_input())].front(); }
  // Serves the packet front() names, `bytes` long; the turn passes to the next input.
  std::uint32_t pop(std::int64_t bytes) {
    const int i = next_input();
    PacketFifo& f = fifo_[static_cast<std::size_t>(i)];
    const std::uint32_t id = f.pop();
    if (f.empty()) waiting_[static_cast<std::size_t>(i) / 64] &= ~(std::uint64_t{1} << (i % 64));
    bytes_[static_cast<std::size_t>(i)] -= bytes;
    --packets_;
    turn_ = i + 1 == inputs() ? 0 : i + 1;
    return id;
  }

 private:
  std::vector<PacketFifo> fifo_;
  std::vector<std::int64_t> bytes_;
  std::vector<std::uint64_t> waiting_;  // bit i: input i's queue holds packets
  std::int64_t packets_ = 0;
  int turn_ = 0;
};

}  // namespace weft::sim
