#include "weft/algo/ring.h"

namespace weft::algo {

Chunk sub_block(const Chunk& region, int parts, int i) {
  std::int64_t b = block_begin(region.count, parts, i);
  return {region.buf, region.offset + b, block_begin(region.count, parts, i + 1) - b};
}

std::size_t ring_reduce_scatter(Program& p, std::size_t first_step, const std::vector<int>& group, int me,
                                const Chunk& region) {
  const int g = static_cast<int>(group.size());
  if (g <= 1) return first_step;
  const int right = group[(me + 1) % g], left = group[(me - 1 + g) % g];
  for (int s = 0; s < g - 1; ++s) {
    p.send(first_step + s, right, sub_block(region, g, ((me - s - 1) % g + g) % g));
    p.recv_reduce(first_step + s, left, sub_block(region, g, ((me - s - 2) % g + 2 * g) % g));
  }
  return first_step + static_cast<std::size_t>(g - 1);
}

std::size_t ring_allgather(Program& p, std::size_t first_step, const std::vector<int>& group, int me,
                           const Chunk& region) {
  const int g = static_cast<int>(group.size());
  if (g <= 1) return first_step;
  const int right = group[(me + 1) % g], left = group[(me - 1 + g) % g];
  for (int s = 0; s < g - 1; ++s) {
    p.send(first_step + s, right, sub_block(region, g, ((me - s) % g + g) % g));
    p.recv(first_step + s, left, sub_block(region, g, ((me - s - 1) % g + g) % g));
  }
  return first_step + static_cast<std::size_t>(g - 1);
}

std::vector<int> all_ranks(int world) {
  std::vector<int> g(static_cast<size_t>(world));
  for (int i = 0; i < world; ++i) g[i] = i;
  return g;
}

int ceil_log2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

std::size_t halving_reduce_scatter(Program& p, std::size_t s, const Folding& f, int v,
                                   const std::function<Chunk(int, int)>& region) {
  int lo = 0, hi = f.p;
  for (int mask = f.p / 2; mask >= 1; mask /= 2) {
    int mid = (lo + hi) / 2;
    Chunk keep = (v & mask) ? region(mid, hi) : region(lo, mid);
    Chunk give = (v & mask) ? region(lo, mid) : region(mid, hi);
    int peer = f.real_rank(v ^ mask);
    p.send(s, peer, give);
    p.recv_reduce(s, peer, keep);  // disjoint from what is sent: reduced as it arrives
    s += 1;
    if (v & mask) lo = mid; else hi = mid;
  }
  return s;
}

Folding::Folding(int w) : world(w), p(1), rem(0) {
  while (p * 2 <= world) p *= 2;
  rem = world - p;
}

}  // namespace weft::algo
