#include "weft/comm/message_signature.h"

#include "weft/algo/collective_facts.h"

namespace weft::comm {

MessageSignature collective_signature(algo::Collective c, DataType dtype, ReduceOp op, std::int64_t count, int root) {
  MessageSignature s;
  s.kind = static_cast<std::uint8_t>(1 + static_cast<int>(c));
  s.dtype = static_cast<std::uint8_t>(dtype);
  if (algo::facts(c).reduces) s.op = static_cast<std::uint8_t>(op);
  if (algo::facts(c).rooted) s.root = root;
  s.count = static_cast<std::uint64_t>(count);
  return s;
}

MessageSignature point_to_point_signature(DataType dtype, std::int64_t count) {
  MessageSignature s;
  s.kind = MessageSignature::kPointToPoint;
  s.dtype = static_cast<std::uint8_t>(dtype);
  s.count = static_cast<std::uint64_t>(count);
  return s;
}

std::string describe(const MessageSignature& s) {
  std::string name;
  if (s.kind == MessageSignature::kPointToPoint) {
    name = "send/recv";
  } else if (s.kind >= 1 && s.kind <= algo::all_collectives().size()) {
    name = algo::collective_name(static_cast<algo::Collective>(s.kind - 1));
  } else {
    return "an unknown operation (code " + std::to_string(s.kind) + ")";
  }
  if (s.op != MessageSignature::kNoReduction && s.op <= static_cast<std::uint8_t>(ReduceOp::kProd))
    name += std::string(" (") + op_name(static_cast<ReduceOp>(s.op)) + ")";
  if (s.root >= 0) name += " from rank " + std::to_string(s.root);
  const char* type = s.dtype <= static_cast<std::uint8_t>(DataType::kU8) ? dtype_name(static_cast<DataType>(s.dtype)) : "?";
  return name + " of " + std::to_string(s.count) + " " + type;
}

bool signatures_agree(const MessageSignature& sent, const MessageSignature& mine) {
  if (sent.kind == MessageSignature::kUnchecked || mine.kind == MessageSignature::kUnchecked) return true;
  return sent.kind == mine.kind && sent.dtype == mine.dtype && sent.op == mine.op && sent.root == mine.root &&
         sent.count == mine.count;
}

}  // namespace weft::comm
