// What a message of the executor belongs to: the operation (a collective, or point to
// point), its element type, its reduction, the count each rank passed and the root. Every
// message's header carries the sender's; the receiver compares it with its own before it
// takes a byte, so ranks that called different operations (a float32 all-reduce against a
// float64 one of the same bytes, SUM against MAX, a broadcast against an all-reduce, a send
// of 20 floats against a receive of 10 doubles) fail with one line naming both sides
// instead of returning garbage. A signature of kind kUnchecked (internal traffic) matches
// anything.
#pragma once

#include <cstdint>
#include <string>

#include "weft/algo/program.h"
#include "weft/comm/reduce.h"

namespace weft::comm {

struct MessageSignature {
  static constexpr std::uint8_t kUnchecked = 0;
  static constexpr std::uint8_t kPointToPoint = 0xfe;
  static constexpr std::uint8_t kNoReduction = 0xff;
  std::uint8_t kind = kUnchecked;  // kUnchecked, kPointToPoint, or 1 + algo::Collective
  std::uint8_t dtype = 0;          // DataType
  std::uint8_t op = kNoReduction;  // ReduceOp of a reducing collective
  std::uint8_t reserved = 0;
  std::int32_t root = -1;          // rooted collectives only
  std::uint64_t count = 0;         // elements each rank passed
};
static_assert(sizeof(MessageSignature) == 16);

// The signature of a collective: the reduction counts only for the reducing ones, the root
// only for the rooted ones.
MessageSignature collective_signature(algo::Collective c, DataType dtype, ReduceOp op, std::int64_t count, int root);
MessageSignature point_to_point_signature(DataType dtype, std::int64_t count);

// "allreduce (sum) of 10 f64", "broadcast from rank 0 of 20 f32", "send/recv of 4 i32".
std::string describe(const MessageSignature& s);

// Whether a message signed `sent` may be taken by an operation signed `mine`.
bool signatures_agree(const MessageSignature& sent, const MessageSignature& mine);

}  // namespace weft::comm
