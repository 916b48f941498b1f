// Runs one rank's Program (algo) on real buffers over channels: the progress engine.
//
// For each step, local copies and reductions run first (a verified program never lets
// them touch what the step's messages touch), then every send and receive advances in
// pieces as far as its channel allows, round after round, until all complete. A message is
// a 32-byte header (magic, sequence number, length, signature), checked on arrival, then the bytes;
// a receive-reduce combines each piece straight from the channel into its destination.
// When nothing moves, the rank spins briefly, then sleeps on poll() (TCP) or on its
// doorbell (shared memory). No progress for the timeout, a dead peer, or a bad header
// throws CommError naming the operation and the peer. The header also carries the
// operation's signature (message_signature.h): a message of another operation, type,
// reduction, count or root is refused before its bytes are taken.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/algo/program.h"
#include "weft/comm/channel.h"
#include "weft/comm/message_signature.h"
#include "weft/comm/wait_policy.h"
#include "weft/comm/reduce.h"

namespace weft::comm {

struct ExecBuffers {
  std::uint8_t* data = nullptr;
  std::int64_t data_origin = 0;  // element offset that `data` points at (for partial buffers)
  std::uint8_t* scratch = nullptr;
  const std::uint8_t* input = nullptr;
  DataType dtype = DataType::kF32;
  ReduceOp op = ReduceOp::kSum;
  // Point-to-point batches: op i of the program's single step moves bytes at direct[i]
  // (counts are then in bytes), signed direct_signatures[i].
  std::vector<std::uint8_t*> direct;
  std::vector<MessageSignature> direct_signatures;
};

// One path to a peer, with its own message sequence numbers.
struct Lane {
  Channel* channel = nullptr;
  double share = 1;  // of a striped message's bytes (the lanes' shares sum to 1)
  std::string where;  // the path: "shm", or the address it was made to
  std::uint32_t send_seq = 0;
  std::uint32_t recv_seq = 0;
};

struct PeerLink {
  Channel* channel = nullptr;  // null for this rank itself
  int global_rank = -1;        // for messages
  int pid = 0;                 // for liveness checks on shared memory (0: unknown)
  std::uint32_t send_seq = 0;
  std::uint32_t recv_seq = 0;
  // Striping (seed 003 chapter 4: one transfer over several paths): with more than one
  // lane (lanes[0] is `channel`), a message of at least stripe_min bytes is cut into one
  // part per lane, in proportion to their shares (measured bandwidths); both sides cut it
  // alike. Each part is a message of its lane. Smaller messages take `channel` alone.
  std::vector<Lane> lanes;
  std::uint64_t stripe_min = 1 << 20;
};

struct ExecContext {
  std::string op;         // for errors: "allreduce"
  int rank = 0;           // global rank of this process
  double timeout_s = 60;  // no progress for this long fails the operation
  Doorbell* doorbell = nullptr;  // this rank's, when shared memory is in use
  WaitSettings wait;              // how a rank waits for its peers (wait_policy.h)
  MessageSignature signature{};   // every message's but point-to-point batches'
};

// What this thread's waits did so far (wait_policy.h).
WaitCounts wait_counts();

// Bytes sent to each peer in each step, for traces: steps[s] = list of (global peer, bytes).
using StepSends = std::vector<std::vector<std::pair<int, std::int64_t>>>;

void execute(const algo::Program& program, const ExecBuffers& buffers, std::vector<PeerLink>& peers,
             const ExecContext& ctx, StepSends* sends = nullptr);

}  // namespace weft::comm
