#include "weft/comm/selection.h"

#include "weft/util/env.h"

namespace weft::comm {

using algo::Collective;

const char* algorithm_override_variable(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "WEFT_ALLREDUCE_ALGO";
    case Collective::kBroadcast: return "WEFT_BROADCAST_ALGO";
    case Collective::kReduce: return "WEFT_REDUCE_ALGO";
    case Collective::kGather: return "WEFT_GATHER_ALGO";
    case Collective::kScatter: return "WEFT_SCATTER_ALGO";
    case Collective::kAllGather: return "WEFT_ALLGATHER_ALGO";
    case Collective::kReduceScatter: return "WEFT_REDUCE_SCATTER_ALGO";
    case Collective::kAllToAll: return "WEFT_ALLTOALL_ALGO";
    case Collective::kBarrier: return "WEFT_BARRIER_ALGO";
  }
  return "";
}

std::string select_algorithm(Collective c, std::int64_t bytes, const LinkShape& links) {
  if (auto a = env_string(algorithm_override_variable(c))) return *a;
  // Measured with weft comm-bench on a 2-core machine with 2, 3 and 4 ranks over shared
  // memory (docs/communication.md has the figures); across hosts the ring's bandwidth
  // optimality dominates sooner, and hierarchical keeps the slow links rail-aligned.
  const int w = links.world;
  const bool across_hosts = links.tcp_links > 0 && links.shm_links > 0 && links.local_world > 1;
  switch (c) {
    case Collective::kAllReduce:
      if (w <= 2) return bytes <= 1024 ? "recursive_doubling" : "ring";
      if (bytes <= 16 * 1024) return w <= 4 ? "recursive_doubling" : "rabenseifner";
      if (across_hosts) return bytes <= 1024 * 1024 ? "rabenseifner" : "hierarchical";
      // Over TCP alone, fewer and larger messages win: 4 ranks, 1 MiB: rabenseifner 675 us,
      // ring 819 (level from 8 MiB); 3 ranks: double_tree 536 us, ring 765 (4 MiB: 4.0 ms
      // against 4.9).
      if (links.tcp_links > 0 && links.shm_links == 0) {
        if ((w & (w - 1)) == 0) return bytes <= 1024 * 1024 ? "rabenseifner" : "ring";
        return "double_tree";
      }
      // 4 ranks on 2 cores: the ring, whose neighbours sit on different cores, wins from
      // 32 KiB (64 KiB: 37 us, rabenseifner 45, direct 65); 8 ranks: rabenseifner's fewer
      // steps win up to 64 KiB; 3 ranks: the tree's two halves beat the ring's 4 steps from
      // 256 KiB to 1 MiB.
      if ((w & (w - 1)) == 0) return w >= 8 && bytes <= 64 * 1024 ? "rabenseifner" : "ring";
      return bytes <= 128 * 1024 || bytes > 1024 * 1024 ? "ring" : "double_tree";
    case Collective::kBroadcast: return bytes <= 256 * 1024 ? "binomial" : "chain";
    case Collective::kReduce: return "binomial";
    case Collective::kGather: return "linear";
    case Collective::kScatter: return "linear";
    // 4 ranks: the ring from 8 KiB in all (allgather 16 KiB: 9.6 us, recursive doubling 13.2).
    case Collective::kAllGather: return bytes * w <= 4 * 1024 ? "recursive_doubling" : "ring";
    case Collective::kReduceScatter: return bytes * w <= 4 * 1024 ? "recursive_halving" : "ring";
    case Collective::kAllToAll: return "pairwise";
    case Collective::kBarrier: return "dissemination";
  }
  return "";
}

}  // namespace weft::comm
