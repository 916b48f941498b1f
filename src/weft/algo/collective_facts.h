// What each collective is, answered in one place for the communicator, comm-bench, the
// tracer and the simulator: its name, whether it has a root, whether it reduces, the
// elements of its data buffer for a per-rank count, and the bus-bandwidth factor of
// nccl-tests (algbw x factor = busbw: the bandwidth a ring of links needs).
//
//   collective      data elements  busbw factor (W ranks)
//   allreduce       count          2 (W - 1) / W
//   broadcast       count          1
//   reduce          count          1
//   gather          count W        (W - 1) / W
//   scatter         count W        (W - 1) / W
//   allgather       count W        (W - 1) / W
//   reduce_scatter  count W        (W - 1) / W
//   alltoall        count W        (W - 1) / W
//   barrier         0              0
//
// On one rank nothing crosses a link: every factor is 0, as nccl-tests prints.
#pragma once

#include <cstdint>

#include "weft/algo/program.h"

namespace weft::algo {

struct CollectiveFacts {
  const char* name;
  bool rooted;   // a root sends (broadcast, scatter) or receives (reduce, gather)
  bool reduces;  // combines values with a reduction operator
};

const CollectiveFacts& facts(Collective c);
// Elements of the buffer the collective's programs run on, for `count` elements per rank.
std::int64_t data_elements(Collective c, std::int64_t count, int world);
double busbw_factor(Collective c, int world);

}  // namespace weft::algo
