#include "weft/algo/trees.h"

#include <algorithm>
#include <cstdint>

namespace weft::algo {

namespace {
int height_of(int size) { return size <= 1 ? 0 : 31 - __builtin_clz(static_cast<unsigned>(size)); }
}  // namespace

TreePlace place_in_binary_tree(int n, int v) {
  TreePlace out;
  out.root_height = height_of(n);
  int lo = 0, hi = n;
  for (;;) {
    const int mid = (lo + hi) / 2;
    if (mid == v) {
      out.height = height_of(hi - lo);
      if (lo < mid) out.left = (lo + mid) / 2, out.left_height = height_of(mid - lo);
      if (mid + 1 < hi) out.right = (mid + 1 + hi) / 2, out.right_height = height_of(hi - mid - 1);
      return out;
    }
    out.parent = mid;
    out.parent_height = height_of(hi - lo);
    out.right_child = v > mid;
    if (v < mid) hi = mid;
    else lo = mid + 1;
  }
}

int bit_tree_parent(int n, int v) {
  if (v == 0) return -1;
  const int bit = v & -v;
  const int up = (v ^ bit) | (bit << 1);
  return up >= n ? v ^ bit : up;
}

int double_tree_parent(int n, int v, bool second) {
  if (!second) return bit_tree_parent(n, v);
  if (n % 2 == 0) {  // mirrored
    const int up = bit_tree_parent(n, n - 1 - v);
    return up < 0 ? -1 : n - 1 - up;
  }
  const int up = bit_tree_parent(n, (v - 1 + n) % n);  // shifted by one
  return up < 0 ? -1 : (up + 1) % n;
}

std::vector<RankTree> host_chain_trees(int world, int local_world) {
  const int local = local_world > 1 && world % local_world == 0 ? local_world : 1;
  const int hosts = world / local;
  std::vector<RankTree> out;
  for (int c = 0; c < local; ++c) {
    for (bool second : {false, true}) {
      RankTree t;
      t.parent.assign(static_cast<std::size_t>(world), -1);
      for (int h = 0; h < hosts; ++h) {
        const int up_host = double_tree_parent(hosts, h, second);
        for (int i = 0; i < local; ++i) {
          const int rank = h * local + (c + i) % local;
          t.parent[rank] = i > 0 ? h * local + (c + i - 1) % local : up_host < 0 ? -1 : up_host * local + c;
        }
      }
      out.push_back(std::move(t));
      if (hosts == 1) break;  // one host: the second tree would be the first again
    }
  }
  return out;
}

namespace {

struct TreeShape {
  std::vector<std::vector<int>> children;  // in rank order
  std::vector<int> height, depth, child_index;
  int root = -1;
};

TreeShape shape_of(const RankTree& t) {
  const int n = static_cast<int>(t.parent.size());
  TreeShape s;
  s.children.resize(n);
  s.height.assign(n, 0);
  s.depth.assign(n, 0);
  s.child_index.assign(n, 0);
  for (int r = 0; r < n; ++r) {
    if (t.parent[r] < 0) {
      s.root = r;
      continue;
    }
    s.child_index[r] = static_cast<int>(s.children[t.parent[r]].size());
    s.children[t.parent[r]].push_back(r);
  }
  // Depths from the root down, then heights from the deepest up.
  std::vector<int> order{s.root};
  for (std::size_t i = 0; i < order.size(); ++i)
    for (int c : s.children[order[i]]) {
      s.depth[c] = s.depth[order[i]] + 1;
      order.push_back(c);
    }
  for (auto it = order.rbegin(); it != order.rend(); ++it)
    if (t.parent[*it] >= 0) s.height[t.parent[*it]] = std::max(s.height[t.parent[*it]], s.height[*it] + 1);
  return s;
}

}  // namespace

int max_children(const std::vector<RankTree>& trees) {
  int most = 0;
  for (const RankTree& t : trees) {
    std::vector<int> count(t.parent.size(), 0);
    for (int up : t.parent)
      if (up >= 0) most = std::max(most, ++count[up]);
  }
  return most;
}

void pipelined_tree_allreduce(Program& p, const RankTree& tree, int rank, const Chunk& region, int segments,
                              int slots, std::uint16_t up_channel, std::uint16_t down_channel) {
  const TreeShape s = shape_of(tree);
  const std::size_t k = static_cast<std::size_t>(std::max(slots, 1));
  const std::size_t top = static_cast<std::size_t>(s.height[s.root]);
  const std::size_t h = static_cast<std::size_t>(s.height[rank]), d = static_cast<std::size_t>(s.depth[rank]);
  const int up = tree.parent[rank];
  // The root reduces and starts the broadcast in one sequence; every other rank forwards
  // down in a channel of its own, beside its reductions going up.
  const std::uint16_t down = up < 0 ? up_channel : down_channel;
  auto in = [&p](std::uint16_t mine, std::uint16_t theirs) {
    p.channel = mine;
    p.peer_channel = theirs;
  };
  for (int seg = 0; seg < segments; ++seg) {
    const Chunk piece = [&] {
      std::int64_t b = block_begin(region.count, segments, seg);
      return Chunk{region.buf, region.offset + b, block_begin(region.count, segments, seg + 1) - b};
    }();
    const std::size_t at = static_cast<std::size_t>(seg);
    in(up_channel, up_channel);
    for (int c : s.children[rank]) {
      p.recv_reduce(k * (at + static_cast<std::size_t>(s.height[c])) + static_cast<std::size_t>(s.child_index[c]), c,
                    piece);
    }
    if (up >= 0) {
      p.send(k * (at + h) + static_cast<std::size_t>(s.child_index[rank]), up, piece);
      in(down_channel, tree.parent[up] < 0 ? up_channel : down_channel);
      p.recv(k * (at + top) + d - 1, up, piece);
    }
    in(down, down_channel);
    for (int c : s.children[rank]) p.send(k * (at + top) + d, c, piece);
  }
  in(up_channel, -1);
}

}  // namespace weft::algo
