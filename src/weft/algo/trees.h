// Trees over ranks for tree collectives.
//
//   place_in_binary_tree
//                       one position of a balanced in-order binary tree over [0, n)
//   double_tree_parent  NCCL's pair of complementary binary trees over positions
//   host_chain_trees    NCCL-style trees built from the host layout (seed 002 ch. 13): one
//                       pair of complementary binary trees over the hosts per channel, and
//                       within each host a chain through its ranks
//   pipelined_tree_allreduce
//                       reduce a region up one such tree and broadcast it down, cut into
//                       segments that flow through the tree one behind another
#pragma once

#include <cstdint>
#include <vector>

#include "weft/algo/program.h"

namespace weft::algo {

// One position of the balanced in-order binary tree over positions [0, n) (the root of
// [lo, hi) is (lo + hi) / 2, its children the roots of [lo, mid) and [mid + 1, hi)), found in
// O(log n) without building the tree: its parent and children (-1: none), whether it is a
// right child, and the heights (a leaf's is 0; a subtree of m positions is floor(log2 m)
// high). Positions are mapped to ranks by the caller.
struct TreePlace {
  int parent = -1, left = -1, right = -1;
  int height = 0, parent_height = 0, left_height = 0, right_height = 0, root_height = 0;
  bool right_child = false;
};
TreePlace place_in_binary_tree(int n, int v);

// A tree over every rank of the world: parent[r], or -1 for the root.
struct RankTree {
  std::vector<int> parent;
};

// NCCL's double binary tree over [0, n) (its trees.cc): in the first, v's parent clears v's
// lowest set bit and sets the next (clearing it only, past the end), so 0 is the root and the
// odd positions are the leaves; the second is the first mirrored (v -> n - 1 - v) for even n,
// shifted by one for odd n, so every position interior in one is a leaf in the other (odd n:
// all but position 0). Parent of v, -1 for the root.
int bit_tree_parent(int n, int v);
int double_tree_parent(int n, int v, bool second);

// 2C trees, C = local_world channels (1 when local_world is 0, 1 or does not divide the
// world). Channel c's two trees start on each host at local rank c (its "head") and chain
// through the host's ranks in order from there; the heads are joined across hosts by NCCL's
// double binary tree over the hosts (double_tree_parent), so a host interior in one tree of
// the pair is a leaf of the other and carries its share of the data about once up and once
// down. Every hop between hosts joins two ranks of one local index: it stays on one rail.
std::vector<RankTree> host_chain_trees(int world, int local_world);

// The most children any rank has in any of `trees`.
int max_children(const std::vector<RankTree>& trees);

// Appends to `p` (this rank's program) the all-reduce of `region` over `tree`, cut into
// `segments` pieces. Going up, a rank of height h sends segment s to its parent at step
// slots * (s + h) + (its index among the parent's children), so the children of one rank
// never write the same segment in one step (slots >= max_children of every tree run in the
// same program); going down, the root sends segment s at step slots * (s + H) (H: the
// root's height) and a rank at depth d forwards it at that step + d. A rank so sends each
// segment up before the final one can come back down. The reductions going up run in
// `up_channel`, the forwarding down in `down_channel` (the root's in `up_channel`: it starts
// a segment down once it has reduced it), beside each other as NCCL's tree kernel splits
// its warps between the two directions; the data they share is ordered by the messages.
void pipelined_tree_allreduce(Program& p, const RankTree& tree, int rank, const Chunk& region, int segments,
                              int slots, std::uint16_t up_channel, std::uint16_t down_channel);

}  // namespace weft::algo
