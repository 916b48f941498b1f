// The symbolic executor: runs every rank's program on symbolic data and checks the
// collective's postcondition.
//
// Each element carries the set of ranks whose contributions it holds and the position it
// came from. Reductions must combine equal positions and disjoint rank sets (no element
// counted twice); messages are matched per pair of ranks in order with equal sizes, and a
// send completes only when its receive is posted (rendezvous), so a program that could
// deadlock on a real transport fails here. Within one step, no operation may write what
// another operation of the step reads or writes.
#pragma once

#include <cstdint>
#include <string>

#include "weft/algo/registry.h"

namespace weft::algo {

struct SymbolicResult {
  bool ok = true;
  std::string error;             // the first problem found
  std::size_t max_steps = 0;     // the longest program
  std::int64_t max_elements_sent = 0;  // by any one rank
  std::int64_t messages = 0;           // in total
};

// World sizes up to 64.
SymbolicResult verify(Collective c, const std::string& algorithm, int world, std::int64_t n,
                      const Options& options = {});
// The same for any builder (tests use it to show that broken programs are caught).
SymbolicResult verify(Collective c, Builder builder, int world, std::int64_t n, const Options& options = {});

}  // namespace weft::algo
