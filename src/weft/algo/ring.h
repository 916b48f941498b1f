// Building blocks shared by several algorithms: ring reduce-scatter and all-gather over a
// region of a buffer, the folding of non-power-of-two worlds, and recursive halving.
#pragma once

#include <functional>
#include <vector>

#include "weft/algo/program.h"

namespace weft::algo {

// Sub-block i of a region split among `parts` members.
Chunk sub_block(const Chunk& region, int parts, int i);

// Ring reduce-scatter among `group` (ranks in ring order; `me` is this rank's index in it)
// over `region`: afterwards member i holds the reduction of sub-block i. Uses steps from
// `first_step`; returns the first step after it.
std::size_t ring_reduce_scatter(Program& p, std::size_t first_step, const std::vector<int>& group, int me,
                                const Chunk& region);
// Ring all-gather: member i starts with sub-block i and ends with all of them.
std::size_t ring_allgather(Program& p, std::size_t first_step, const std::vector<int>& group, int me,
                           const Chunk& region);

// Recursive doubling on a world that need not be a power of two: the largest power of two
// p <= world takes part; ranks below 2 * (world - p) are paired, the even one folded into
// the odd one. This maps ranks to the participating ("virtual") ranks and back.
struct Folding {
  int world, p, rem;
  explicit Folding(int world);
  bool folded_away(int rank) const { return rank < 2 * rem && rank % 2 == 0; }
  int virtual_rank(int rank) const { return rank < 2 * rem ? rank / 2 : rank - rem; }
  int real_rank(int v) const { return v < rem ? 2 * v + 1 : v + rem; }
  // The real ranks a virtual rank stands for: [first_real(v), first_real(v + 1)).
  int first_real(int v) const { return v < rem ? 2 * v : v + rem; }
  // The data blocks (n elements split among the real ranks) of virtual ranks [vlo, vhi).
  Chunk real_blocks(std::int64_t n, int vlo, int vhi) const {
    std::int64_t b = block_begin(n, world, first_real(vlo));
    return Chunk{Buf::kData, b, block_begin(n, world, first_real(vhi)) - b};
  }
};

// Ranks 0..world-1, in order.
std::vector<int> all_ranks(int world);
int ceil_log2(int n);

// Recursive-halving reduce-scatter among the participating ranks of `f`: `region(lo, hi)`
// is the chunk of virtual blocks [lo, hi). Each round sends the half the partner keeps and
// reduces the partner's half of what this rank keeps into it as it arrives (one step per
// round). Afterwards virtual rank v holds block v reduced. Returns the next step.
std::size_t halving_reduce_scatter(Program& p, std::size_t first_step, const Folding& f, int v,
                                   const std::function<Chunk(int, int)>& region);

}  // namespace weft::algo
