#include "weft/comm/executor.h"

#include <poll.h>
#include <signal.h>
#include <sched.h>

#include <chrono>
#include <cstring>

#include "weft/util/env.h"
#include "weft/util/error.h"

namespace weft::comm {

namespace {

using Clock = std::chrono::steady_clock;
using algo::Buf;
using algo::Chunk;
using algo::Op;
using algo::OpKind;

constexpr std::uint32_t kMagic = 0x31544657;  // "WFT1"
// Polling, yielding the core between rounds, lasts this long (WEFT_SPIN_US, default 2 ms)
// before the rank sleeps. Yielding lets another rank on the same core run meanwhile (more
// ranks than cores), so the peer this rank waits for gets the core at once, while a sleep
// would cost a kernel wake-up per step. Measured with 4 ranks on 2 cores: 100 us gave
// 0.38 GB/s at 64 KiB, 2 ms 1.05 GB/s. An idle rank still sleeps after 2 ms.
std::chrono::microseconds spin_before_sleep() {
  static const auto spin = std::chrono::microseconds(env_int_in("WEFT_SPIN_US", 0, 1000000).value_or(2000));
  return spin;
}
// For the first few microseconds it only pauses the core (a message is often that close),
// unless the rank shares its core with another rank: then the peer it waits for may need
// that very core, and pausing only delays it (4 ranks on 2 cores, 8-byte all-reduce: 22 us
// with the pause, 8 us without).
constexpr auto kBusySpin = std::chrono::microseconds(5);

struct Header {
  std::uint32_t magic;
  std::uint32_t seq;
  std::uint64_t bytes;
};
static_assert(sizeof(Header) == 16);

struct Transfer {
  const Op* op;
  PeerLink* link;
  std::uint8_t* ptr;         // payload (send source or receive destination)
  std::uint64_t bytes = 0;   // payload length
  std::size_t pad = 0;       // zero bytes after the payload, so the next header stays 8-aligned
  std::size_t pad_done = 0;
  Header header{};
  std::size_t header_done = 0;
  std::uint64_t done = 0;    // payload bytes moved
  std::uint8_t carry[8] = {};  // a partial element of a receive-reduce
  std::size_t carry_n = 0;
  std::uint64_t applied = 0;  // payload bytes reduced into the destination
  const std::uint8_t* base = nullptr;  // a receive-reduce with a src: dst = base (op) received
};


}  // namespace

void execute(const algo::Program& program, const ExecBuffers& b, std::vector<PeerLink>& peers, const ExecContext& ctx,
             StepSends* step_sends) {
  const std::size_t esize = b.direct.empty() ? element_size(b.dtype) : 1;
  auto addr = [&](const Chunk& c) -> std::uint8_t* {
    switch (c.buf) {
      case Buf::kData: return b.data + (c.offset - b.data_origin) * static_cast<std::int64_t>(esize);
      case Buf::kScratch: return b.scratch + c.offset * static_cast<std::int64_t>(esize);
      case Buf::kInput: return const_cast<std::uint8_t*>(b.input) + c.offset * static_cast<std::int64_t>(esize);
    }
    return nullptr;
  };
  auto fail = [&](const std::string& why, int peer, std::size_t step) -> CommError {
    return CommError(ctx.op + " failed on rank " + std::to_string(ctx.rank) + " at step " + std::to_string(step) + ": " +
                         why + " [timeout " + std::to_string(static_cast<int>(ctx.timeout_s)) + " s]",
                     ctx.op, ctx.rank, peer, ctx.timeout_s);
  };
  if (step_sends) step_sends->assign(program.steps.size(), {});

  // Reused from step to step, round to round and call to call (a thread runs one program
  // at a time): no allocation while waiting, none per operation.
  thread_local std::vector<Transfer> sends, recvs;
  thread_local std::vector<Transfer*> pending_sends, pending_recvs;
  thread_local std::vector<int> busy_send, busy_recv;
  for (std::size_t s = 0; s < program.steps.size(); ++s) {
    const algo::Step& step = program.steps[s];
    sends.clear();
    recvs.clear();
    for (std::size_t i = 0; i < step.ops.size(); ++i) {
      const Op& op = step.ops[i];
      switch (op.kind) {
        case OpKind::kCopy:
          std::memmove(addr(op.dst), addr(op.src), static_cast<std::size_t>(op.dst.count) * esize);
          break;
        case OpKind::kReduce:
          reduce_into(b.dtype, b.op, addr(op.dst), addr(op.src), static_cast<std::size_t>(op.dst.count));
          break;
        case OpKind::kSend: {
          Transfer t{&op, &peers.at(op.peer), b.direct.empty() ? addr(op.src) : b.direct[i]};
          t.bytes = static_cast<std::uint64_t>(op.src.count) * esize;
          t.pad = static_cast<std::size_t>((8 - t.bytes % 8) % 8);
          t.header = {kMagic, t.link->send_seq++, t.bytes};
          sends.push_back(t);
          if (step_sends) (*step_sends)[s].emplace_back(t.link->global_rank, static_cast<std::int64_t>(t.bytes));
          break;
        }
        case OpKind::kRecv:
        case OpKind::kRecvReduce: {
          Transfer t{&op, &peers.at(op.peer), b.direct.empty() ? addr(op.dst) : b.direct[i]};
          t.bytes = static_cast<std::uint64_t>(op.dst.count) * esize;
          t.pad = static_cast<std::size_t>((8 - t.bytes % 8) % 8);
          if (op.kind == OpKind::kRecvReduce && op.src.count > 0) t.base = addr(op.src);
          recvs.push_back(t);
          break;
        }
      }
    }
    // Messages to (and from) one peer move in program order, one at a time.
    pending_sends.clear();
    pending_recvs.clear();
    for (auto& t : sends) pending_sends.push_back(&t);
    for (auto& t : recvs) pending_recvs.push_back(&t);

    auto advance_send = [&](Transfer& t) {
      Channel* ch = t.link->channel;
      std::size_t moved = 0;
      if (t.header_done < sizeof(Header)) {
        std::size_t k = ch->write_some(reinterpret_cast<std::uint8_t*>(&t.header) + t.header_done,
                                       sizeof(Header) - t.header_done);
        t.header_done += k;
        moved += k;
        if (t.header_done < sizeof(Header)) return moved;
      }
      if (t.done < t.bytes) {
        std::size_t k = ch->write_some(t.ptr + t.done, static_cast<std::size_t>(t.bytes - t.done));
        t.done += k;
        moved += k;
        if (t.done < t.bytes) return moved;
      }
      if (t.pad_done < t.pad) {
        static const std::uint8_t zeros[8] = {};
        std::size_t k = ch->write_some(zeros, t.pad - t.pad_done);
        t.pad_done += k;
        moved += k;
      }
      return moved;
    };
    auto advance_recv = [&](Transfer& t) {
      Channel* ch = t.link->channel;
      std::size_t moved = 0;
      if (t.header_done < sizeof(Header)) {
        std::size_t k = ch->read_some(reinterpret_cast<std::uint8_t*>(&t.header) + t.header_done,
                                      sizeof(Header) - t.header_done);
        t.header_done += k;
        moved += k;
        if (t.header_done < sizeof(Header)) return moved;
        std::uint32_t want_seq = t.link->recv_seq++;
        if (t.header.magic != kMagic || t.header.seq != want_seq || t.header.bytes != t.bytes) {
          throw fail("protocol error from rank " + std::to_string(t.link->global_rank) + ": expected message " +
                         std::to_string(want_seq) + " of " + std::to_string(t.bytes) + " bytes",
                     t.link->global_rank, s);
        }
      }
      if (t.done >= t.bytes) {
        if (t.pad_done < t.pad) {
          std::uint8_t skip[8];
          std::size_t k = ch->read_some(skip, t.pad - t.pad_done);
          t.pad_done += k;
          moved += k;
        }
        return moved;
      }
      std::size_t left = static_cast<std::size_t>(t.bytes - t.done);
      if (t.op->kind == OpKind::kRecv) {
        std::size_t k = ch->read_some(t.ptr + t.done, left);
        t.done += k;
        return moved + k;
      }
      // dst (op)= piece, or dst = base (op) piece.
      auto combine = [&](const std::uint8_t* piece, std::size_t elements) {
        if (t.base) {
          reduce_from(b.dtype, b.op, t.ptr + t.applied, t.base + t.applied, piece, elements);
        } else {
          reduce_into(b.dtype, b.op, t.ptr + t.applied, piece, elements);
        }
        t.applied += elements * esize;
      };
      std::size_t k = ch->consume_some(left, [&](const std::uint8_t* p, std::size_t n) {
        while (n > 0) {
          if (t.carry_n > 0 || n < esize) {
            std::size_t take = std::min(esize - t.carry_n, n);
            std::memcpy(t.carry + t.carry_n, p, take);
            t.carry_n += take;
            p += take;
            n -= take;
            if (t.carry_n == esize) {
              combine(t.carry, 1);
              t.carry_n = 0;
            }
            continue;
          }
          std::size_t whole = n / esize * esize;
          if (reinterpret_cast<std::uintptr_t>(p) % esize != 0) {
            // A piece that does not start on an element boundary in memory: go through an
            // aligned copy (a typed load from it would be undefined).
            alignas(16) std::uint8_t aligned[4096];
            whole = std::min(whole, sizeof aligned / esize * esize);
            std::memcpy(aligned, p, whole);
            combine(aligned, whole / esize);
          } else {
            combine(p, whole / esize);
          }
          p += whole;
          n -= whole;
        }
      });
      t.done += k;
      return moved + k;
    };
    auto complete = [](const Transfer& t) {
      return t.header_done == sizeof(Header) && t.done >= t.bytes && t.pad_done >= t.pad;
    };

    auto progress_round = [&]() {
      bool progressed = false;
      // The first unfinished transfer per peer advances; later ones to the same peer wait.
      busy_send.clear();
      busy_recv.clear();
      for (auto it = pending_sends.begin(); it != pending_sends.end();) {
        Transfer& t = **it;
        bool blocked = false;
        for (int p : busy_send) blocked = blocked || p == t.op->peer;
        if (blocked) { ++it; continue; }
        try {
          progressed = advance_send(t) > 0 || progressed;
        } catch (const CommError& e) {
          throw fail(std::string(e.what()) + " (sending to rank " + std::to_string(t.link->global_rank) + ")",
                     t.link->global_rank, s);
        }
        if (complete(t)) {
          it = pending_sends.erase(it);
          progressed = true;
        } else {
          busy_send.push_back(t.op->peer);
          ++it;
        }
      }
      for (auto it = pending_recvs.begin(); it != pending_recvs.end();) {
        Transfer& t = **it;
        bool blocked = false;
        for (int p : busy_recv) blocked = blocked || p == t.op->peer;
        if (blocked) { ++it; continue; }
        try {
          progressed = advance_recv(t) > 0 || progressed;
        } catch (const CommError& e) {
          if (e.op() == ctx.op) throw;
          throw fail(std::string(e.what()) + " (receiving from rank " + std::to_string(t.link->global_rank) + ")",
                     t.link->global_rank, s);
        }
        if (complete(t)) {
          it = pending_recvs.erase(it);
          progressed = true;
        } else {
          busy_recv.push_back(t.op->peer);
          ++it;
        }
      }
      return progressed;
    };

    Clock::time_point last_progress, last_liveness;  // read once the step goes idle
    unsigned idle_rounds = 0;
    while (!pending_sends.empty() || !pending_recvs.empty()) {
      if (progress_round()) {
        idle_rounds = 0;
        continue;
      }
      // Idle from the first round that moved nothing; the clock is read every 8th round
      // while pausing (a read costs about as much as a round).
      if (idle_rounds++ == 0) {
        last_progress = Clock::now();
        if (last_liveness == Clock::time_point{}) last_liveness = last_progress;
      }
      if (ctx.spin && idle_rounds % 8 != 0) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
        continue;
      }
      const auto idle = Clock::now() - last_progress;
      if (ctx.spin && idle < kBusySpin) continue;
      if (idle < spin_before_sleep()) {
        ::sched_yield();
        continue;
      }
      // Sleep until something can move: poll TCP sockets, or wait on the doorbell.
      std::vector<pollfd> fds;
      bool shm = false;
      for (Transfer* t : pending_sends) {
        int fd = t->link->channel->fd();
        if (fd >= 0) fds.push_back({fd, POLLOUT, 0}); else shm = true;
      }
      for (Transfer* t : pending_recvs) {
        int fd = t->link->channel->fd();
        if (fd >= 0) fds.push_back({fd, POLLIN, 0}); else shm = true;
      }
      if (shm && ctx.doorbell) {
        Doorbell& bell = *ctx.doorbell;
        std::uint32_t seen = bell.seq.load(std::memory_order_seq_cst);
        bell.sleeping.store(1, std::memory_order_seq_cst);
        std::atomic_thread_fence(std::memory_order_seq_cst);
        bool moved = progress_round();
        if (!moved) {
          if (!fds.empty()) {
            ::poll(fds.data(), fds.size(), 1);
          } else {
            bell.wait(seen, 20000);
          }
        }
        bell.sleeping.store(0, std::memory_order_seq_cst);
        if (moved) {
          idle_rounds = 0;
          continue;
        }
      } else if (!fds.empty()) {
        ::poll(fds.data(), fds.size(), 100);
      }
      auto now = Clock::now();
      // A peer on shared memory that exited cannot close a socket: check its pid.
      if (now - last_liveness > std::chrono::milliseconds(100)) {
        last_liveness = now;
        auto check = [&](Transfer* t) {
          int pid = t->link->pid;
          if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) {
            throw fail("rank " + std::to_string(t->link->global_rank) + " (pid " + std::to_string(pid) + ") exited",
                       t->link->global_rank, s);
          }
        };
        for (Transfer* t : pending_sends) check(t);
        for (Transfer* t : pending_recvs) check(t);
      }
      if (std::chrono::duration<double>(now - last_progress).count() > ctx.timeout_s) {
        Transfer* t = !pending_recvs.empty() ? pending_recvs.front() : pending_sends.front();
        throw fail("no progress with rank " + std::to_string(t->link->global_rank) + " within the timeout",
                   t->link->global_rank, s);
      }
    }
  }
}

}  // namespace weft::comm
