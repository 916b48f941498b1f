#include "weft/algo/allreduce.h"

#include <algorithm>
#include <tuple>

#include "weft/algo/ring.h"
#include "weft/algo/trees.h"
#include "weft/util/error.h"

namespace weft::algo {

namespace {

// Reduce `region` up the balanced binary tree over `world` positions (position q is rank
// (q + shift) mod world) and broadcast it back down. A node sends to its parent at step
// 2*height (+1 for a right child), so its two children never write the region in the same
// step. O(log world): the tree is not built.
void tree_allreduce(Program& p, int world, int shift, int me_pos, const Chunk& region) {
  const TreePlace t = place_in_binary_tree(world, me_pos);
  auto rank_of = [&](int q) { return (q + shift) % world; };
  const int reduce_steps = 2 * t.root_height + 1;
  // A node's edge to its parent: up at edge_step, down at down_step.
  auto edge_step = [](int height, bool right) { return 2 * height + (right ? 1 : 0); };
  auto down_step = [&](int parent_height, bool right) {
    return reduce_steps + 2 * (t.root_height - parent_height) + (right ? 1 : 0);
  };
  for (const auto& [child, height, right] : {std::tuple{t.left, t.left_height, false}, std::tuple{t.right, t.right_height, true}}) {
    if (child < 0) continue;
    p.recv_reduce(static_cast<size_t>(edge_step(height, right)), rank_of(child), region);
    p.send(static_cast<size_t>(down_step(t.height, right)), rank_of(child), region);
  }
  if (t.parent >= 0) {
    p.send(static_cast<size_t>(edge_step(t.height, t.right_child)), rank_of(t.parent), region);
    p.recv(static_cast<size_t>(down_step(t.parent_height, t.right_child)), rank_of(t.parent), region);
  }
}

}  // namespace

Program allreduce_ring(int rank, int world, std::int64_t n, const Options&) {
  Program p;
  p.algorithm = "ring";
  auto group = all_ranks(world);
  Chunk all{Buf::kData, 0, n};
  std::size_t s = ring_reduce_scatter(p, 0, group, rank, all);
  ring_allgather(p, s, group, rank, all);
  p.compact();
  return p;
}

Program allreduce_relay_ring(int rank, int world, std::int64_t n, const Options&) {
  Program p;
  p.algorithm = "relay_ring";
  Chunk all{Buf::kData, 0, n};
  const int right = (rank + 1) % world, left = (rank - 1 + world) % world;
  // Reduce: rank s passes the running sum to s + 1 at step s.
  if (rank < world - 1) p.send(static_cast<size_t>(rank), right, all);
  if (rank > 0) p.recv_reduce(static_cast<size_t>(rank - 1), left, all);
  // Pass the total around: rank W-1 sends to 0 at step W-1, then 0 to 1, ...
  const size_t base = static_cast<size_t>(world - 1);
  for (int s = 0; s < world - 1; ++s) {
    int sender = (world - 1 + s) % world;
    if (rank == sender) p.send(base + s, right, all);
    if (rank == (sender + 1) % world) p.recv(base + s, left, all);
  }
  p.compact();
  return p;
}

Program allreduce_direct(int rank, int world, std::int64_t n, const Options&) {
  Program p;
  p.algorithm = "direct";
  Chunk mine = block(n, world, rank);
  // Step 0: block j goes to rank j; the blocks others send to me land in scratch slots.
  p.need_scratch(mine.count * std::max(world - 1, 0));
  int slot = 0;
  std::vector<Chunk> slots;
  for (int j = 0; j < world; ++j) {
    if (j == rank) continue;
    p.send(0, j, block(n, world, j));
    Chunk s{Buf::kScratch, slot * mine.count, mine.count};
    p.recv(0, j, s);
    slots.push_back(s);
    ++slot;
  }
  // Steps 1..W-1: reduce the slots into my block, one per step (a fixed order).
  for (size_t k = 0; k < slots.size(); ++k) p.reduce(1 + k, slots[k], mine);
  // Then every rank sends its reduced block to all others.
  const size_t last = 1 + slots.size();
  for (int j = 0; j < world; ++j) {
    if (j == rank) continue;
    p.send(last, j, mine);
    p.recv(last, j, block(n, world, j));
  }
  p.compact();
  return p;
}

Program allreduce_double_tree(int rank, int world, std::int64_t n, const Options&) {
  Program p;
  p.algorithm = "double_tree";
  // Tree A over ranks in order; tree B over ranks shifted by one, so that most interior
  // nodes of one tree are leaves of the other.
  Chunk first{Buf::kData, 0, n / 2}, second{Buf::kData, n / 2, n - n / 2};
  tree_allreduce(p, world, 0, rank, first);
  tree_allreduce(p, world, 1, (rank - 1 + world) % world, second);
  p.compact();
  return p;
}

// Elements per pipelined tree segment (256 KiB of f32, NCCL's tree chunk), and the most
// segments a tree is cut into.
constexpr std::int64_t kTreeSegmentElements = 1 << 16;
constexpr int kMaxTreeSegments = 64;

Program allreduce_tree(int rank, int world, std::int64_t n, const Options& o) {
  Program p;
  p.algorithm = "tree";
  const std::vector<RankTree> trees = host_chain_trees(world, o.local_world);
  const int parts = static_cast<int>(trees.size());
  const std::int64_t per_tree = (n + parts - 1) / parts;
  const std::int64_t size = o.segment_elements > 0 ? o.segment_elements : kTreeSegmentElements;
  const int segments = static_cast<int>(std::clamp<std::int64_t>((per_tree + size - 1) / size, 1, kMaxTreeSegments));
  const int slots = max_children(trees);
  for (int t = 0; t < parts; ++t) {  // each tree two channels of its own: up and down
    pipelined_tree_allreduce(p, trees[t], rank, block(n, parts, t), segments, slots, static_cast<std::uint16_t>(2 * t),
                             static_cast<std::uint16_t>(2 * t + 1));
  }
  p.compact();
  return p;
}

Program allreduce_recursive_doubling(int rank, int world, std::int64_t n, const Options&) {
  Program p;
  p.algorithm = "recursive_doubling";
  Folding f(world);
  Chunk all{Buf::kData, 0, n};
  Chunk tmp{Buf::kScratch, 0, n};
  p.need_scratch(n);
  size_t s = 0;
  if (f.rem > 0) {
    if (f.folded_away(rank)) {
      p.send(0, rank + 1, all);
      p.recv(1 + 2 * static_cast<size_t>(__builtin_ctz(static_cast<unsigned>(f.p))), rank + 1, all);
      p.compact();
      return p;
    }
    if (rank < 2 * f.rem) p.recv_reduce(0, rank - 1, all);
    s = 1;
  }
  const int v = f.virtual_rank(rank);
  for (int mask = 1; mask < f.p; mask <<= 1) {
    int peer = f.real_rank(v ^ mask);
    p.send(s, peer, all);
    p.recv(s, peer, tmp);
    p.reduce(s + 1, tmp, all);
    s += 2;
  }
  if (f.rem > 0 && rank < 2 * f.rem) p.send(s, rank - 1, all);
  p.compact();
  return p;
}

Program allreduce_rabenseifner(int rank, int world, std::int64_t n, const Options&) {
  Program p;
  p.algorithm = "rabenseifner";
  Folding f(world);
  Chunk all{Buf::kData, 0, n};
  const int log_p = ceil_log2(f.p);
  const size_t final_step = (f.rem > 0 ? 1 : 0) + 2 * static_cast<size_t>(log_p);
  if (f.folded_away(rank)) {
    p.send(0, rank + 1, all);
    p.recv(final_step, rank + 1, all);
    p.compact();
    return p;
  }
  size_t s = 0;
  if (f.rem > 0) {
    if (rank < 2 * f.rem) p.recv_reduce(0, rank - 1, all);
    s = 1;
  }
  const int v = f.virtual_rank(rank);
  auto region = [&](int lo, int hi) {  // virtual blocks [lo, hi) of p blocks
    std::int64_t b = block_begin(n, f.p, lo);
    return Chunk{Buf::kData, b, block_begin(n, f.p, hi) - b};
  };
  // Reduce-scatter by recursive halving: virtual rank v ends with block v.
  s = halving_reduce_scatter(p, s, f, v, region);
  int lo = v, hi = v + 1;
  // All-gather by recursive doubling.
  for (int mask = 1; mask < f.p; mask <<= 1) {
    int peer = f.real_rank(v ^ mask);
    int size = hi - lo;
    int peer_lo = (v & mask) ? lo - size : hi;
    p.send(s, peer, region(lo, hi));
    p.recv(s, peer, region(peer_lo, peer_lo + size));
    lo = std::min(lo, peer_lo);
    hi = lo + 2 * size;
    s += 1;
  }
  if (f.rem > 0 && rank < 2 * f.rem) p.send(final_step, rank - 1, all);
  p.compact();
  return p;
}

namespace {

// The order of channel c's ring: hosts in order, each host's local ranks from c on, reversed
// on odd hosts.
std::vector<int> rail_ring_order(int hosts, int local, int channel) {
  std::vector<int> order;
  order.reserve(static_cast<std::size_t>(hosts) * static_cast<std::size_t>(local));
  for (int h = 0; h < hosts; ++h)
    for (int i = 0; i < local; ++i) {
      const int step = h % 2 == 0 ? i : local - 1 - i;
      order.push_back(h * local + (channel + step) % local);
    }
  return order;
}

}  // namespace

Program allreduce_rail_rings(int rank, int world, std::int64_t n, const Options& o) {
  Program p;
  p.algorithm = "rail_rings";
  const int local = o.local_world;
  const bool rails = local > 1 && world % local == 0;
  const int per_rail = std::max(1, o.channels_per_rail);
  const int channels = (rails ? local : 1) * per_rail;
  Chunk all{Buf::kData, 0, n};
  for (int c = 0; c < channels; ++c) {
    p.channel = static_cast<std::uint16_t>(c);
    const std::vector<int> order = rails ? rail_ring_order(world / local, local, c / per_rail) : all_ranks(world);
    const int me = static_cast<int>(std::find(order.begin(), order.end(), rank) - order.begin());
    const Chunk part = sub_block(all, channels, c);
    const std::size_t s = ring_reduce_scatter(p, 0, order, me, part);
    ring_allgather(p, s, order, me, part);
  }
  p.compact();
  return p;
}

Program allreduce_hierarchical(int rank, int world, std::int64_t n, const Options& o) {
  const int local = o.local_world;
  if (local < 1 || world % local != 0) {
    throw ConfigError("hierarchical all-reduce needs the ranks per host (" + std::to_string(local) +
                      ") to divide the world (" + std::to_string(world) + ")");
  }
  Program p;
  p.algorithm = "hierarchical";
  const int hosts = world / local, host = rank / local, l = rank % local;
  std::vector<int> host_group, rail_group;
  for (int i = 0; i < local; ++i) host_group.push_back(host * local + i);
  for (int h = 0; h < hosts; ++h) rail_group.push_back(h * local + l);
  Chunk all{Buf::kData, 0, n};
  std::size_t s = ring_reduce_scatter(p, 0, host_group, l, all);
  Chunk mine = sub_block(all, local, l);
  s = ring_reduce_scatter(p, s, rail_group, host, mine);
  s = ring_allgather(p, s, rail_group, host, mine);
  ring_allgather(p, s, host_group, l, all);
  p.compact();
  return p;
}

}  // namespace weft::algo
