#include "weft/comm/executor.h"

#include <poll.h>
#include <signal.h>
#include <sched.h>

#include <chrono>
#include <cstring>
#include <optional>

#include "weft/util/error.h"
#include "weft/util/machine.h"
#include "weft/util/spin_pause.h"

namespace weft::comm {

namespace {

using Clock = std::chrono::steady_clock;
using algo::Buf;
using algo::Chunk;
using algo::Op;
using algo::OpKind;

constexpr std::uint32_t kMagic = 0x32544657;  // "WFT2"
struct Header {
  std::uint32_t magic;
  std::uint32_t seq;
  std::uint64_t bytes;
  MessageSignature signature;
};
static_assert(sizeof(Header) == 32);

struct Transfer {
  const Op* op;
  PeerLink* link;
  std::uint8_t* ptr;         // payload (send source or receive destination)
  Channel* channel = nullptr;  // the path it takes (a lane of the link's, when striped)
  std::uint32_t* recv_seq = nullptr;  // that path's count of messages received
  int path = 0;              // peer x lanes + lane: transfers on one path go in order
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
  MessageSignature signature{};  // this side's operation
};


// One call of execute(): the program's steps, one after another. Per step, start() runs the
// local copies and reductions and lays out the step's transfers; then progress rounds move
// them (advance_send, advance_recv) until all complete, and while nothing moves the rank
// waits (wait_idle: pause, yield, then sleep on the sockets or the doorbell), checking that
// its peers live and that the timeout has not passed.
class ProgramRun {
 public:
  ProgramRun(const algo::Program& program, const ExecBuffers& b, std::vector<PeerLink>& peers, const ExecContext& ctx,
             StepSends* step_sends)
      : program_(program), b_(b), peers_(peers), ctx_(ctx), step_sends_(step_sends),
        esize_(b.direct.empty() ? element_size(b.dtype) : 1) {
    if (step_sends_) step_sends_->assign(program.steps.size(), {});
  }

  void run() {
    for (step_ = 0; step_ < program_.steps.size(); ++step_) {
      start(program_.steps[step_]);
      idle_rounds_ = 0;
      last_liveness_ = {};
      while (!pending_sends_.empty() || !pending_recvs_.empty()) {
        if (progress_round()) {
          wait_ended();
          continue;
        }
        wait_idle();
      }
    }
  }

 private:
  std::uint8_t* addr(const Chunk& c) const {
    const auto es = static_cast<std::int64_t>(esize_);
    switch (c.buf) {
      case Buf::kData: return b_.data + (c.offset - b_.data_origin) * es;
      case Buf::kScratch: return b_.scratch + c.offset * es;
      case Buf::kInput: return const_cast<std::uint8_t*>(b_.input) + c.offset * es;
    }
    return nullptr;
  }

  // A message of another operation: no timeout involved.
  CommError refuse(const std::string& why, int peer) const {
    return CommError(ctx_.op + " failed on rank " + std::to_string(ctx_.rank) + ": " + why, ctx_.op, ctx_.rank, peer,
                     ctx_.timeout_s);
  }

  CommError fail(const std::string& why, int peer) const {
    return CommError(ctx_.op + " failed on rank " + std::to_string(ctx_.rank) + " in step " + std::to_string(step_ + 1) +
                         " of its " + std::to_string(program_.steps.size()) + "-step schedule: " +
                         why + " [timeout " + std::to_string(static_cast<int>(ctx_.timeout_s)) + " s]",
                     ctx_.op, ctx_.rank, peer, ctx_.timeout_s);
  }

  // Local operations at once; the step's messages as transfers, in program order per peer.
  void start(const algo::Step& step) {
    sends_.clear();
    recvs_.clear();
    for (std::size_t i = 0; i < step.ops.size(); ++i) {
      const Op& op = step.ops[i];
      switch (op.kind) {
        case OpKind::kCopy:
          std::memmove(addr(op.dst), addr(op.src), static_cast<std::size_t>(op.dst.count) * esize_);
          break;
        case OpKind::kReduce:
          reduce_into(b_.dtype, b_.op, addr(op.dst), addr(op.src), static_cast<std::size_t>(op.dst.count));
          break;
        case OpKind::kSend: {
          Transfer t{&op, &peers_.at(op.peer), b_.direct.empty() ? addr(op.src) : b_.direct[i]};
          t.bytes = static_cast<std::uint64_t>(op.src.count) * esize_;
          t.signature = signature_of(i);
          if (step_sends_) (*step_sends_)[step_].emplace_back(t.link->global_rank, static_cast<std::int64_t>(t.bytes));
          add_parts(t, sends_, true);
          break;
        }
        case OpKind::kRecv:
        case OpKind::kRecvReduce: {
          Transfer t{&op, &peers_.at(op.peer), b_.direct.empty() ? addr(op.dst) : b_.direct[i]};
          t.bytes = static_cast<std::uint64_t>(op.dst.count) * esize_;
          t.signature = signature_of(i);
          if (op.kind == OpKind::kRecvReduce && op.src.count > 0) t.base = addr(op.src);
          add_parts(t, recvs_, false);
          break;
        }
      }
    }
    pending_sends_.clear();
    pending_recvs_.clear();
    for (auto& t : sends_) pending_sends_.push_back(&t);
    for (auto& t : recvs_) pending_recvs_.push_back(&t);
  }

  MessageSignature signature_of(std::size_t op) const {
    return op < b_.direct_signatures.size() ? b_.direct_signatures[op] : ctx_.signature;
  }

  // A message as one transfer on the link's channel, or (striped) one per lane, each lane's
  // part a whole number of elements in proportion to its share.
  void add_parts(Transfer t, std::vector<Transfer>& into, bool send) const {
    PeerLink& link = *t.link;
    const auto one = [&](Transfer part, Channel* channel, std::uint32_t& send_seq, std::uint32_t& recv_seq, int lane) {
      part.channel = channel;
      part.recv_seq = &recv_seq;
      part.path = part.op->peer * 16 + lane;
      part.pad = static_cast<std::size_t>((8 - part.bytes % 8) % 8);
      if (send) part.header = {kMagic, send_seq++, part.bytes, part.signature};
      into.push_back(part);
    };
    if (link.lanes.size() < 2 || t.bytes < link.stripe_min) {
      one(t, link.channel, link.send_seq, link.recv_seq, 0);
      return;
    }
    const std::uint64_t elements = t.bytes / esize_;
    double cumulative = 0;
    std::uint64_t from = 0;
    for (std::size_t k = 0; k < link.lanes.size(); ++k) {
      cumulative += link.lanes[k].share;
      const auto at = static_cast<std::uint64_t>(cumulative * static_cast<double>(elements));
      const std::uint64_t to = k + 1 == link.lanes.size() ? elements : std::min(elements, at);
      Transfer part = t;
      part.ptr = t.ptr + from * esize_;
      if (t.base) part.base = t.base + from * esize_;
      part.bytes = (to - from) * esize_;
      one(part, link.lanes[k].channel, link.lanes[k].send_seq, link.lanes[k].recv_seq, static_cast<int>(k));
      from = to;
    }
  }

  // Header, payload, padding: as far as the channel takes them. Returns the bytes moved.
  std::size_t advance_send(Transfer& t) {
    Channel* ch = t.channel;
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
  }

  // The header (checked), then the payload: copied, or reduced into its destination.
  std::size_t advance_recv(Transfer& t) {
    Channel* ch = t.channel;
    std::size_t moved = 0;
    if (t.header_done < sizeof(Header)) {
      std::size_t k = ch->read_some(reinterpret_cast<std::uint8_t*>(&t.header) + t.header_done,
                                    sizeof(Header) - t.header_done);
      t.header_done += k;
      moved += k;
      if (t.header_done < sizeof(Header)) return moved;
      std::uint32_t want_seq = (*t.recv_seq)++;
      if (t.header.magic == kMagic && !signatures_agree(t.header.signature, t.signature)) {
        refused_ = true;
        throw refuse("rank " + std::to_string(t.link->global_rank) + " sent a message of " +
                       describe(t.header.signature) + ", this rank runs " + describe(t.signature) +
                       ": every rank must call the same operation with the same count, type, reduction and root",
                   t.link->global_rank);
      }
      if (t.header.magic != kMagic || t.header.seq != want_seq || t.header.bytes != t.bytes) {
        throw fail("protocol error from rank " + std::to_string(t.link->global_rank) + ": expected message " +
                       std::to_string(want_seq) + " of " + std::to_string(t.bytes) + " bytes",
                   t.link->global_rank);
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
    std::size_t k = ch->consume_some(left, [&](const std::uint8_t* p, std::size_t n) { reduce_piece(t, p, n); });
    t.done += k;
    return moved + k;
  }

  // dst (op)= piece, or dst = base (op) piece, element by element: a partial element waits
  // in the carry, and a piece not aligned in memory goes through an aligned copy (a typed
  // load from it would be undefined).
  void reduce_piece(Transfer& t, const std::uint8_t* p, std::size_t n) {
    auto combine = [&](const std::uint8_t* piece, std::size_t elements) {
      if (t.base) reduce_from(b_.dtype, b_.op, t.ptr + t.applied, t.base + t.applied, piece, elements);
      else reduce_into(b_.dtype, b_.op, t.ptr + t.applied, piece, elements);
      t.applied += elements * esize_;
    };
    while (n > 0) {
      if (t.carry_n > 0 || n < esize_) {
        std::size_t take = std::min(esize_ - t.carry_n, n);
        std::memcpy(t.carry + t.carry_n, p, take);
        t.carry_n += take;
        p += take;
        n -= take;
        if (t.carry_n == esize_) {
          combine(t.carry, 1);
          t.carry_n = 0;
        }
        continue;
      }
      std::size_t whole = n / esize_ * esize_;
      if (reinterpret_cast<std::uintptr_t>(p) % esize_ != 0) {
        alignas(16) std::uint8_t aligned[4096];
        whole = std::min(whole, sizeof aligned / esize_ * esize_);
        std::memcpy(aligned, p, whole);
        combine(aligned, whole / esize_);
      } else {
        combine(p, whole / esize_);
      }
      p += whole;
      n -= whole;
    }
  }

  static bool complete(const Transfer& t) {
    return t.header_done == sizeof(Header) && t.done >= t.bytes && t.pad_done >= t.pad;
  }

  // The first unfinished transfer per path (a peer's channel, or lane) and direction
  // advances; later ones on the same path wait. Returns whether anything moved.
  template <typename Advance>
  bool advance_pending(std::vector<Transfer*>& pending, std::vector<int>& busy, Advance advance, const char* towards) {
    bool progressed = false;
    busy.clear();
    for (auto it = pending.begin(); it != pending.end();) {
      Transfer& t = **it;
      bool blocked = false;
      for (int p : busy) blocked = blocked || p == t.path;
      if (blocked) {
        ++it;
        continue;
      }
      try {
        progressed = (this->*advance)(t) > 0 || progressed;
      } catch (const CommError& e) {
        if (e.op() == ctx_.op) throw;
        throw fail(std::string(e.what()) + " (" + towards + " rank " + std::to_string(t.link->global_rank) + ")",
                   t.link->global_rank);
      }
      if (complete(t)) {
        it = pending.erase(it);
        progressed = true;
      } else {
        busy.push_back(t.path);
        ++it;
      }
    }
    return progressed;
  }

  bool progress_round() {
    bool sent = false;
    try {
      sent = advance_pending(pending_sends_, busy_send_, &ProgramRun::advance_send, "sending to");
    } catch (const CommError&) {
      // A peer that refused this operation (another operation's message) closed its end:
      // what it had sent before, still to be read here, says so, and this rank refuses in the
      // same words instead of reporting a lost connection.
      try {
        advance_pending(pending_recvs_, busy_recv_, &ProgramRun::advance_recv, "receiving from");
      } catch (const CommError&) {
        if (refused_) throw;
      }
      throw;
    }
    const bool received = advance_pending(pending_recvs_, busy_recv_, &ProgramRun::advance_recv, "receiving from");
    return sent || received;
  }

  // Nothing moved this round: pause, yield or sleep (WaitPolicy decides); fail on a dead
  // peer or the timeout. While pausing the clock is read every 8th round (a read costs
  // about as much as a round).
  void wait_idle() {
    if (idle_rounds_++ == 0) {
      last_progress_ = Clock::now();
      if (last_liveness_ == Clock::time_point{}) last_liveness_ = last_progress_;
      paused_ = !ctx_.wait.shares_core && policy_.pause_budget(ctx_.wait) > WaitPolicy::Duration::zero();
    }
    if (paused_ && idle_rounds_ % 8 != 0) {
      pause();
      return;
    }
    const auto now = Clock::now();
    switch (policy_.next(ctx_.wait, now - last_progress_, now)) {
      case WaitPolicy::Action::kPause:
        pause();
        return;
      case WaitPolicy::Action::kYield: {
        paused_ = false;
        ++counts_.yields;
        ::sched_yield();
        const auto after = Clock::now();
        bool strangers = false;
        if (after - now > WaitPolicy::kLongYield) {
          ++counts_.long_yields;
          const std::optional<int> runnable = runnable_threads();
          strangers = !runnable || *runnable > ctx_.wait.ranks_on_host;
          if (strangers) ++counts_.yields_to_strangers;
        }
        policy_.yielded(after - now, after, strangers);
        return;
      }
      case WaitPolicy::Action::kSleep:
        break;
    }
    paused_ = false;
    ++counts_.sleeps;
    if (sleep_until_ready()) {
      wait_ended();
      return;
    }
    const auto later = Clock::now();
    if (later - last_liveness_ > std::chrono::milliseconds(100)) {
      last_liveness_ = later;
      check_peers_live();
    }
    if (std::chrono::duration<double>(later - last_progress_).count() > ctx_.timeout_s) {
      Transfer* t = !pending_recvs_.empty() ? pending_recvs_.front() : pending_sends_.front();
      throw fail("no progress with rank " + std::to_string(t->link->global_rank) + " within the timeout",
                 t->link->global_rank);
    }
  }

  void pause() {
    ++counts_.pauses;
    spin_pause();
  }

  // Something moved after idle rounds: the policy learns how long the wait was.
  void wait_ended() {
    if (idle_rounds_ == 0) return;
    policy_.ended(ctx_.wait, Clock::now() - last_progress_);
    idle_rounds_ = 0;
  }

  // Sleeps on the TCP sockets (poll) or this rank's doorbell (shared memory) until a
  // transfer can move or a short while passes. Returns whether a last round moved something.
  bool sleep_until_ready() {
    std::vector<pollfd> fds;
    bool shm = false;
    for (Transfer* t : pending_sends_) {
      int fd = t->channel->fd();
      if (fd >= 0) fds.push_back({fd, POLLOUT, 0}); else shm = true;
    }
    for (Transfer* t : pending_recvs_) {
      int fd = t->channel->fd();
      if (fd >= 0) fds.push_back({fd, POLLIN, 0}); else shm = true;
    }
    if (shm && ctx_.doorbell) {
      Doorbell& bell = *ctx_.doorbell;
      std::uint32_t seen = bell.seq.load(std::memory_order_seq_cst);
      bell.sleeping.fetch_add(1, std::memory_order_seq_cst);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      const bool moved = progress_round();
      if (!moved) {
        if (!fds.empty()) ::poll(fds.data(), fds.size(), 1);
        else bell.wait(seen, 20000);
      }
      bell.sleeping.fetch_sub(1, std::memory_order_seq_cst);
      return moved;
    }
    if (!fds.empty()) ::poll(fds.data(), fds.size(), 100);
    return false;
  }

  // A peer on shared memory that exited cannot close a socket: check its pid.
  void check_peers_live() const {
    auto check = [&](const Transfer* t) {
      int pid = t->link->pid;
      if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) {
        throw fail("rank " + std::to_string(t->link->global_rank) + " (pid " + std::to_string(pid) + ") exited",
                   t->link->global_rank);
      }
    };
    for (const Transfer* t : pending_sends_) check(t);
    for (const Transfer* t : pending_recvs_) check(t);
  }

  const algo::Program& program_;
  const ExecBuffers& b_;
  std::vector<PeerLink>& peers_;
  const ExecContext& ctx_;
  StepSends* step_sends_;
  const std::size_t esize_;
  std::size_t step_ = 0;
  unsigned idle_rounds_ = 0;
  bool paused_ = false;  // this wait is still in its pausing phase
  bool refused_ = false;  // a peer's message was another operation's
  Clock::time_point last_progress_, last_liveness_;  // read once a step goes idle
  // Reused from step to step, round to round and call to call (a thread runs one program
  // at a time): no allocation while waiting, none per operation.
  static thread_local std::vector<Transfer> sends_, recvs_;
  static thread_local std::vector<Transfer*> pending_sends_, pending_recvs_;
  static thread_local std::vector<int> busy_send_, busy_recv_;

 public:
  // The thread's wait policy (it learns from call to call) and what its waits did.
  static thread_local WaitPolicy policy_;
  static thread_local WaitCounts counts_;
};

thread_local std::vector<Transfer> ProgramRun::sends_, ProgramRun::recvs_;
thread_local std::vector<Transfer*> ProgramRun::pending_sends_, ProgramRun::pending_recvs_;
thread_local std::vector<int> ProgramRun::busy_send_, ProgramRun::busy_recv_;
thread_local WaitPolicy ProgramRun::policy_;
thread_local WaitCounts ProgramRun::counts_;

}  // namespace

void execute(const algo::Program& program, const ExecBuffers& b, std::vector<PeerLink>& peers, const ExecContext& ctx,
             StepSends* step_sends) {
  ProgramRun(program, b, peers, ctx, step_sends).run();
}

WaitCounts wait_counts() { return ProgramRun::counts_; }

}  // namespace weft::comm
