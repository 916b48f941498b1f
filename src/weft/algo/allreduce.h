// All-reduce algorithms. Every one leaves the same, bitwise-identical reduction on every
// rank (each element is combined in one fixed order, then copied).
//
//   ring                reduce-scatter then all-gather around a ring: 2(W-1) steps,
//                       2(W-1)/W * n elements sent per rank (bandwidth-optimal)
//   relay_ring          seed 003 chapter 2: the whole buffer is reduced hop by hop around the
//                       ring, then the total is passed around: 2(W-1) steps of n elements
//   direct              seed 003 chapter 4's "tree all-reduce" on a full mesh: every rank sends
//                       block j to rank j at once, rank j reduces it, then sends it to all
//   double_tree         two complementary binary trees, each reducing then broadcasting half
//                       of the data (NCCL's double binary tree, without pipelining)
//   tree                NCCL's tree from the host layout: per channel (local rank) a chain
//                       through each host and two complementary binary trees over the hosts,
//                       each reducing then broadcasting its share, pipelined in segments of
//                       256 KiB (see trees.h)
//   recursive_doubling  log2(W) exchanges of the whole buffer (non-powers of two folded)
//   rabenseifner        recursive-halving reduce-scatter then recursive-doubling all-gather:
//                       2 log2(W) steps, about 2n elements sent per rank
//   hierarchical        within each host a ring reduce-scatter, across hosts one ring
//                       all-reduce per local rank (rail-aligned), within each host a ring
//                       all-gather (needs Options::local_world dividing the world)
#pragma once

#include "weft/algo/program.h"

namespace weft::algo {

Program allreduce_ring(int rank, int world, std::int64_t n, const Options& o);
Program allreduce_relay_ring(int rank, int world, std::int64_t n, const Options& o);
Program allreduce_direct(int rank, int world, std::int64_t n, const Options& o);
Program allreduce_double_tree(int rank, int world, std::int64_t n, const Options& o);
Program allreduce_tree(int rank, int world, std::int64_t n, const Options& o);
Program allreduce_recursive_doubling(int rank, int world, std::int64_t n, const Options& o);
Program allreduce_rabenseifner(int rank, int world, std::int64_t n, const Options& o);
Program allreduce_hierarchical(int rank, int world, std::int64_t n, const Options& o);
// NCCL-style rings for rail-optimized fabrics (seed 002 ch. 13): `local_world` rings
// (channels) over every rank, the data split among them. Channel c visits each host's ranks
// from local rank c on, forwards on even hosts and backwards on odd ones, so every hop
// between hosts joins two ranks of one local index: it stays on one rail (with an odd number
// of hosts, all but the hop that closes the ring). Without ranks per host that divide the
// world: one ring in rank order. `channels_per_rail` k > 1 runs k rings on each rail's
// order (channels c*k .. c*k+k-1 on rail c), each with its share of the data: as NCCL runs
// several channels per NIC, each on connections of its own (in a fabric, other ECMP paths).
Program allreduce_rail_rings(int rank, int world, std::int64_t n, const Options& o);

}  // namespace weft::algo
