// A port of the simulated fabric: one end of a link, on a switch or a GPU, with its eight
// traffic classes' queues, the PFC state of each (paused by the peer, pausing the peer, the
// ingress bytes and headroom it accounts), the frame on the wire and its counters. Laid out
// for the per-packet path: what every frame reads and writes in the first cache line, each
// class's queue and buffer state in one more.
#pragma once

#include <cstddef>
#include <cstdint>

#include "weft/sim/packet.h"

namespace weft::sim {

struct Port {
  // What every frame reads and writes, in the first cache line; then the rest; then each
  // traffic class's state, what a frame of the class touches in one line.
  int node = -1;
  int peer = -1;            // the port at the other end of the link
  int peer_node = -1;       // and its node
  std::uint32_t epoch = 0;  // bumped when the link goes down: packets on the wire are lost
  bool up : 1 = true;
  // The frame on the wire ends at `free_at` (busy until then). A transmission's end is an
  // event only when something waits for the port then (`wake_pending`): a switch port with
  // frames queued, or a GPU's port, which pulls its next frame from its queue pairs.
  bool wake_pending : 1 = false;
  bool endpoint : 1 = false;     // the port of a GPU
  bool cut_through : 1 = false;  // the receiving switch forwards this link's frames at their headers
  bool endpoint_wake_pending : 1 = false;
  std::uint16_t backlog = 0;  // bit q < 8: queue q holds packets; bit kControlBit: `control` does
  std::uint32_t jitter_ps = 0;  // `jitter` when under 2^32 - 1 ps, else 2^32 - 1 (read `jitter`)
  Time free_at = 0;
  double bps = 0;
  Time delay = 0;           // propagation + the receiving node's switching latency
  std::int64_t tx_bytes = 0, tx_payload = 0;

  PacketFifo control;       // PFC frames: ahead of everything, never paused
  Time jitter = 0;          // largest random extra propagation delay of a frame
  int link = -1;
  int dwrr_next = 0;
  std::int64_t headroom = 0;
  // Counters.
  std::int64_t pauses_sent = 0, resumes_sent = 0, pauses_received = 0;
  std::int64_t ecn_marks = 0, drops = 0, trims = 0;
  Time endpoint_wake_at = kNever;

  struct alignas(64) Class {
    // The first line: the queue, its bytes, whether the peer pauses it, and what came in here.
    PacketList queue;
    bool pausing = false;
    bool storming = false;  // a pause storm injected here: never resumes
    bool signalled = false;
    std::int64_t queue_bytes = 0;
    std::int64_t max_queue_bytes = 0;
    // Being paused by the peer (we are the upstream sender).
    Time paused_until = 0;
    Time watchdog_until = 0;
    // Pausing the peer (we are the downstream receiver): bytes held here that came in here,
    // in the node's shared buffer and in this port's PFC headroom (sized `headroom`).
    std::int64_t ingress_bytes = 0;
    std::int64_t headroom_bytes = 0;
    // Then what only some configurations read.
    double deficit = 0;
    Time paused_since = 0;
    Time paused_total = 0;
    // Adaptive routing: the queue bytes this port signalled last and when.
    std::int64_t signalled_bytes = 0;
    Time signalled_at = 0;
    // The peer's pause holds the class at `now` (unless the watchdog ignores it).
    bool paused(Time now) const { return paused_until > now && now >= watchdog_until; }
  } c[8];

  static constexpr int kControlBit = 8;
  bool holds(int q) const { return (backlog >> q) & 1u; }
  bool busy(Time now) const { return free_at > now; }
  // How loaded class q looks to a switch choosing among ports: its bytes, and one more
  // while a frame is on the wire.
  std::int64_t load(int q, Time now) const { return c[q].queue_bytes + (busy(now) ? 1 : 0); }
  // Whether anything waits here: a queued packet or a PFC frame.
  bool holds_anything() const { return backlog != 0; }
  void set_holds(int q, bool holds) {
    backlog = static_cast<std::uint16_t>(holds ? backlog | (1u << q) : backlog & ~(1u << q));
  }
  void enqueue(PacketPool& pool, int q, std::uint32_t id) {
    c[q].queue.push(pool, id);
    set_holds(q, true);
  }
  std::uint32_t dequeue(const PacketPool& pool, int q) {
    const std::uint32_t id = c[q].queue.pop(pool);
    if (c[q].queue.empty()) set_holds(q, false);
    return id;
  }
  void push_control(std::uint32_t id) {
    control.push(id);
    set_holds(kControlBit, true);
  }
  std::uint32_t pop_control() {
    const std::uint32_t id = control.pop();
    if (control.empty()) set_holds(kControlBit, false);
    return id;
  }
};
static_assert(offsetof(Port, control) == 64, "a port's first cache line holds what every frame reads");
static_assert(offsetof(Port::Class, deficit) == 64, "a class's first line holds its queue and buffer state");

}  // namespace weft::sim
