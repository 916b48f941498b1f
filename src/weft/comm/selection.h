// The selection table: which algorithm a collective runs for a message size on a group's
// links, as measured with weft comm-bench (docs/communication.md has the table and the
// figures). WEFT_<COLLECTIVE>_ALGO (WEFT_ALLREDUCE_ALGO, ...) overrides it.
#pragma once

#include <cstdint>
#include <string>

#include "weft/algo/program.h"

namespace weft::comm {

// What the choice depends on besides the collective and the size.
struct LinkShape {
  int world = 1;        // ranks of the group
  int tcp_links = 0;    // this rank's links over TCP
  int shm_links = 0;    // and over shared memory
  int local_world = 0;  // ranks per host when hosts hold equal blocks (0: irregular)
};

// The environment variable that overrides the choice for a collective.
const char* algorithm_override_variable(algo::Collective c);
// `bytes`: the per-rank buffer (count x element size).
std::string select_algorithm(algo::Collective c, std::int64_t bytes, const LinkShape& links);

}  // namespace weft::comm
