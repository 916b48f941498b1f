// The schedule IR: collective algorithms as data.
//
// A collective algorithm is a pure function (rank, world, element count, options) ->
// Program. A program is a list of steps; the operations of a step may run concurrently,
// and step k+1 starts when every operation of step k has completed. Operations move or
// combine element ranges ("chunks") of three buffers:
//
//   kData     the collective's buffer of n elements (in and out; see Collective)
//   kScratch  program.scratch elements of temporary space
//   kInput    the send buffer of all-to-all, and of an all-reduce run out of place
//             (Options::out_of_place: kData starts undefined and the program reads each
//             element from kInput until it has written it; see read_input_first)
//
// Messages between a pair of ranks are matched in order: the k-th send from a to b meets
// the k-th receive at b from a. The real communicator (comm) executes programs on bytes;
// the simulator (sim) turns every send into traffic; the symbolic executor (symbolic.h)
// proves each program correct.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace weft::algo {

enum class Buf : std::uint8_t { kData, kScratch, kInput };

struct Chunk {
  Buf buf = Buf::kData;
  std::int64_t offset = 0;  // in elements
  std::int64_t count = 0;
  std::int64_t end() const { return offset + count; }
};

enum class OpKind : std::uint8_t {
  kSend,        // send src to peer
  kRecv,        // receive from peer into dst
  kRecvReduce,  // dst = dst (op) received; with a src chunk: dst = src (op) received
  kCopy,        // dst = src, locally
  kReduce,      // dst = dst (op) src, locally
};

struct Op {
  OpKind kind;
  int peer = -1;
  Chunk src;
  Chunk dst;
  // The channel (NCCL's term) the operation runs in, and for a message the channel it
  // meets at the peer. An executor may run each channel's operations as a program of its
  // own, beside the others (the simulator does, each on its own queue pairs): a program is
  // built so that wherever two channels touch the same data, messages order the accesses.
  std::uint16_t channel = 0, peer_channel = 0;
};

struct Step {
  std::vector<Op> ops;
};

struct Program {
  std::string algorithm;
  std::vector<Step> steps;
  std::int64_t scratch = 0;  // elements of scratch space needed
  // The channel the builders below tag new operations with, and the peer's (-1: the same).
  std::uint16_t channel = 0;
  int peer_channel = -1;

  // Builders used by the algorithms. A step index past the end appends steps.
  Step& step(std::size_t index);
  void send(std::size_t step, int peer, Chunk src);
  void recv(std::size_t step, int peer, Chunk dst);
  void recv_reduce(std::size_t step, int peer, Chunk dst);
  void copy(std::size_t step, Chunk src, Chunk dst);
  void reduce(std::size_t step, Chunk src, Chunk dst);
  void need_scratch(std::int64_t elements);
  std::uint16_t theirs() const { return peer_channel < 0 ? channel : static_cast<std::uint16_t>(peer_channel); }
  // Drops empty steps and zero-length operations (except zero-length messages of a barrier,
  // which carry synchronization).
  void compact(bool keep_empty_messages = false);
};

// What the data buffer holds before and after each collective (n elements, world ranks,
// block r = elements [block_begin(n, world, r), block_begin(n, world, r + 1))):
//   kAllReduce      every rank's data -> on every rank, the elementwise reduction
//   kBroadcast      the root's data -> on every rank
//   kReduce         every rank's data -> on the root, the reduction
//   kGather         rank r's block r -> on the root, every block
//   kScatter        the root's data -> on rank r, block r
//   kAllGather      rank r's block r -> on every rank, every block
//   kReduceScatter  every rank's data -> on rank r, block r of the reduction
//   kAllToAll       input block j of rank i -> data block i of rank j
//   kBarrier        no data (n = 0); no rank leaves before every rank arrived
enum class Collective : std::uint8_t {
  kAllReduce, kBroadcast, kReduce, kGather, kScatter, kAllGather, kReduceScatter, kAllToAll, kBarrier
};

const char* collective_name(Collective c);
// Throws ConfigError listing the known names.
Collective parse_collective(const std::string& name);
const std::vector<Collective>& all_collectives();

struct Options {
  int root = 0;          // rooted collectives
  int local_world = 0;   // hierarchical: ranks per host (0: not hierarchical)
  int segments = 4;      // pipelined chain broadcast: pieces the data is cut into
  bool out_of_place = false;  // all-reduce: the data starts in kInput (see read_input_first)
  std::int64_t segment_elements = 0;  // pipelined tree: elements per segment (0: its default)
  int channels_per_rail = 1;  // rail_rings: rings per rail (NCCL's channels per NIC), each its share
  // Every field, for comparing options (programs built with equal options are equal).
  auto fields() const { return std::make_tuple(root, local_world, segments, out_of_place, segment_elements, channels_per_rail); }
};

// Rewrites a program whose kData initially holds n elements of input into one that finds
// that input in kInput and kData undefined: until an element of kData has been written, it
// is read from kInput instead (sends and local sources), and a receive-reduce into it
// becomes dst = input (op) received. Only what a step reads and has not been written is
// copied in (in a step of copies before that step; at the end for elements never written).
// An out-of-place all-reduce so saves a pass over the buffer.
Program read_input_first(Program p, std::int64_t n);

// Balanced partition of n elements into `parts` blocks: block i starts here.
std::int64_t block_begin(std::int64_t n, int parts, int i);
inline Chunk block(std::int64_t n, int parts, int i, Buf buf = Buf::kData) {
  std::int64_t b = block_begin(n, parts, i);
  return {buf, b, block_begin(n, parts, i + 1) - b};
}

// The channels a program's operations run in or meet at a peer (at least 1).
std::size_t channel_count(const Program& p);

// Per-program traffic figures, for cost formulas and tests.
struct ProgramStats {
  std::size_t steps = 0;
  std::int64_t messages = 0;       // sends
  std::int64_t elements_sent = 0;  // total over all sends
};
ProgramStats stats(const Program& p);

}  // namespace weft::algo
