// The other collectives' algorithms (all-reduce is in allreduce.h).
//
//   broadcast       binomial (log2 W steps of n elements), chain (the data cut into
//                   Options::segments pieces pipelined down a chain: W - 2 + segments steps)
//   reduce          binomial (log2 W steps, recv-reduce at each parent)
//   gather, scatter linear (one step: every rank talks to the root directly)
//   allgather       ring (W - 1 steps), recursive_doubling (log2 W steps; non-powers of two
//                   folded)
//   reduce_scatter  ring (W - 1 steps), recursive_halving (log2 W steps)
//   alltoall        pairwise (W - 1 steps: at step s, send to rank + s, receive from rank - s)
//   barrier         dissemination (ceil(log2 W) rounds of empty messages)
#pragma once

#include "weft/algo/program.h"

namespace weft::algo {

Program broadcast_binomial(int rank, int world, std::int64_t n, const Options& o);
Program broadcast_chain(int rank, int world, std::int64_t n, const Options& o);
Program reduce_binomial(int rank, int world, std::int64_t n, const Options& o);
Program gather_linear(int rank, int world, std::int64_t n, const Options& o);
Program scatter_linear(int rank, int world, std::int64_t n, const Options& o);
Program allgather_ring(int rank, int world, std::int64_t n, const Options& o);
Program allgather_recursive_doubling(int rank, int world, std::int64_t n, const Options& o);
Program reduce_scatter_ring(int rank, int world, std::int64_t n, const Options& o);
Program reduce_scatter_recursive_halving(int rank, int world, std::int64_t n, const Options& o);
Program alltoall_pairwise(int rank, int world, std::int64_t n, const Options& o);
Program barrier_dissemination(int rank, int world, std::int64_t n, const Options& o);

}  // namespace weft::algo
