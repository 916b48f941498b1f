#include "weft/algo/registry.h"

#include "weft/algo/allreduce.h"
#include "weft/algo/collectives.h"
#include "weft/util/error.h"

namespace weft::algo {

const std::vector<Algorithm>& algorithms() {
  using C = Collective;
  static const std::vector<Algorithm> all{
      {C::kAllReduce, "ring", allreduce_ring, "reduce-scatter + all-gather around a ring"},
      {C::kAllReduce, "relay_ring", allreduce_relay_ring, "seed 003: reduce hop by hop, then pass the total around"},
      {C::kAllReduce, "direct", allreduce_direct, "seed 003 chapter 4 one-hop reduce-scatter + all-gather on a full mesh"},
      {C::kAllReduce, "double_tree", allreduce_double_tree, "two complementary binary trees, half the data each"},
      {C::kAllReduce, "tree", allreduce_tree, "NCCL-style: a chain within each host, two binary trees across hosts per channel, pipelined"},
      {C::kAllReduce, "recursive_doubling", allreduce_recursive_doubling, "log2(W) whole-buffer exchanges"},
      {C::kAllReduce, "rabenseifner", allreduce_rabenseifner, "recursive halving + recursive doubling"},
      {C::kAllReduce, "hierarchical", allreduce_hierarchical, "within hosts, then one ring per local rank across hosts"},
      {C::kAllReduce, "rail_rings", allreduce_rail_rings, "NCCL-style: one ring per local rank, every hop between hosts on one rail"},
      {C::kBroadcast, "binomial", broadcast_binomial, "binomial tree"},
      {C::kBroadcast, "chain", broadcast_chain, "pipelined chain"},
      {C::kReduce, "binomial", reduce_binomial, "binomial tree"},
      {C::kGather, "linear", gather_linear, "every rank sends to the root"},
      {C::kScatter, "linear", scatter_linear, "the root sends to every rank"},
      {C::kAllGather, "ring", allgather_ring, "ring"},
      {C::kAllGather, "recursive_doubling", allgather_recursive_doubling, "recursive doubling"},
      {C::kReduceScatter, "ring", reduce_scatter_ring, "ring"},
      {C::kReduceScatter, "recursive_halving", reduce_scatter_recursive_halving, "recursive halving"},
      {C::kAllToAll, "pairwise", alltoall_pairwise, "pairwise exchange"},
      {C::kBarrier, "dissemination", barrier_dissemination, "dissemination"},
  };
  return all;
}

std::vector<std::string> algorithm_names(Collective c) {
  std::vector<std::string> out;
  for (const auto& a : algorithms())
    if (a.collective == c) out.push_back(a.name);
  return out;
}

const Algorithm& find_algorithm(Collective c, const std::string& name) {
  std::string known;
  for (const auto& a : algorithms()) {
    if (a.collective != c) continue;
    if (a.name == name) return a;
    known += (known.empty() ? "" : ", ") + a.name;
  }
  throw ConfigError("unknown " + std::string(collective_name(c)) + " algorithm '" + name + "' (known: " + known + ")");
}

Program build_program(Collective c, const std::string& algorithm, int rank, int world, std::int64_t n,
                      const Options& options) {
  const Algorithm& a = find_algorithm(c, algorithm);
  if (world < 1) throw ConfigError("world size must be at least 1, got " + std::to_string(world));
  if (rank < 0 || rank >= world) {
    throw ConfigError("rank " + std::to_string(rank) + " is outside the world of " + std::to_string(world));
  }
  if (n < 0) throw ConfigError("element count must be >= 0");
  if (options.root < 0 || options.root >= world) {
    throw ConfigError("root " + std::to_string(options.root) + " is outside the world of " + std::to_string(world));
  }
  if (c == Collective::kAllToAll && n % world != 0) {
    throw ConfigError("all-to-all needs a count divisible by the world (" + std::to_string(n) + " % " +
                      std::to_string(world) + " != 0)");
  }
  if (c == Collective::kBarrier) n = 0;
  if (options.out_of_place) {
    if (c != Collective::kAllReduce) throw ConfigError("out-of-place programs exist for allreduce only");
    return read_input_first(a.build(rank, world, n, options), n);
  }
  return a.build(rank, world, n, options);
}

}  // namespace weft::algo
