#include "weft/algo/collective_facts.h"

namespace weft::algo {

const CollectiveFacts& facts(Collective c) {
  static const CollectiveFacts table[] = {
      {"allreduce", false, true}, {"broadcast", true, false},       {"reduce", true, true},
      {"gather", true, false},    {"scatter", true, false},         {"allgather", false, false},
      {"reduce_scatter", false, true}, {"alltoall", false, false}, {"barrier", false, false},
  };
  return table[static_cast<int>(c)];
}

std::int64_t data_elements(Collective c, std::int64_t count, int world) {
  switch (c) {
    case Collective::kAllReduce:
    case Collective::kBroadcast:
    case Collective::kReduce: return count;
    case Collective::kBarrier: return 0;
    default: return count * world;
  }
}

double busbw_factor(Collective c, int world) {
  if (world <= 1 || c == Collective::kBarrier) return 0.0;
  const double w = world;
  switch (c) {
    case Collective::kAllReduce: return 2 * (w - 1) / w;
    case Collective::kBroadcast:
    case Collective::kReduce: return 1.0;
    default: return (w - 1) / w;
  }
}

}  // namespace weft::algo
