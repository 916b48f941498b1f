#include "weft/algo/collectives.h"

#include <algorithm>

#include "weft/algo/ring.h"

namespace weft::algo {

Program broadcast_binomial(int rank, int world, std::int64_t n, const Options& o) {
  Program p;
  p.algorithm = "binomial";
  Chunk all{Buf::kData, 0, n};
  const int vr = (rank - o.root + world) % world;
  auto real = [&](int v) { return (v + o.root) % world; };
  int k = 0;
  for (int mask = 1; mask < world; mask <<= 1, ++k) {
    if (vr < mask && vr + mask < world) p.send(static_cast<size_t>(k), real(vr + mask), all);
    if (vr >= mask && vr < 2 * mask) p.recv(static_cast<size_t>(k), real(vr - mask), all);
  }
  p.compact();
  return p;
}

Program broadcast_chain(int rank, int world, std::int64_t n, const Options& o) {
  Program p;
  p.algorithm = "chain";
  const int vr = (rank - o.root + world) % world;
  auto real = [&](int v) { return (v + o.root) % world; };
  const int segments = static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(o.segments, n)));
  Chunk all{Buf::kData, 0, n};
  for (int j = 0; j < segments; ++j) {
    Chunk seg = sub_block(all, segments, j);
    if (vr > 0) p.recv(static_cast<size_t>(j + vr - 1), real(vr - 1), seg);
    if (vr < world - 1) p.send(static_cast<size_t>(j + vr), real(vr + 1), seg);
  }
  p.compact();
  return p;
}

Program reduce_binomial(int rank, int world, std::int64_t n, const Options& o) {
  Program p;
  p.algorithm = "binomial";
  Chunk all{Buf::kData, 0, n};
  const int vr = (rank - o.root + world) % world;
  auto real = [&](int v) { return (v + o.root) % world; };
  int k = 0;
  for (int mask = 1; mask < world; mask <<= 1, ++k) {
    if (vr & mask) {
      p.send(static_cast<size_t>(k), real(vr - mask), all);
      break;
    }
    if (vr + mask < world) p.recv_reduce(static_cast<size_t>(k), real(vr + mask), all);
  }
  p.compact();
  return p;
}

Program gather_linear(int rank, int world, std::int64_t n, const Options& o) {
  Program p;
  p.algorithm = "linear";
  if (rank == o.root) {
    for (int j = 0; j < world; ++j)
      if (j != rank) p.recv(0, j, block(n, world, j));
  } else {
    p.send(0, o.root, block(n, world, rank));
  }
  p.compact();
  return p;
}

Program scatter_linear(int rank, int world, std::int64_t n, const Options& o) {
  Program p;
  p.algorithm = "linear";
  if (rank == o.root) {
    for (int j = 0; j < world; ++j)
      if (j != rank) p.send(0, j, block(n, world, j));
  } else {
    p.recv(0, o.root, block(n, world, rank));
  }
  p.compact();
  return p;
}

Program allgather_ring(int rank, int world, std::int64_t n, const Options&) {
  Program p;
  p.algorithm = "ring";
  ring_allgather(p, 0, all_ranks(world), rank, Chunk{Buf::kData, 0, n});
  p.compact();
  return p;
}

Program allgather_recursive_doubling(int rank, int world, std::int64_t n, const Options&) {
  Program p;
  p.algorithm = "recursive_doubling";
  Folding f(world);
  // Virtual rank v owns the real blocks of ranks [first_real(v), first_real(v + 1)).
  auto region = [&](int vlo, int vhi) { return f.real_blocks(n, vlo, vhi); };
  const size_t last = (f.rem > 0 ? 1 : 0) + static_cast<size_t>(ceil_log2(f.p));
  if (f.folded_away(rank)) {
    p.send(0, rank + 1, block(n, world, rank));
    Chunk mine = block(n, world, rank);
    p.recv(last, rank + 1, Chunk{Buf::kData, 0, mine.offset});
    p.recv(last, rank + 1, Chunk{Buf::kData, mine.end(), n - mine.end()});
    p.compact();
    return p;
  }
  size_t s = 0;
  if (f.rem > 0) {
    if (rank < 2 * f.rem) p.recv(0, rank - 1, block(n, world, rank - 1));
    s = 1;
  }
  const int v = f.virtual_rank(rank);
  for (int mask = 1; mask < f.p; mask <<= 1, ++s) {
    int base = v & ~(mask - 1);
    int peer_base = base ^ mask;
    p.send(s, f.real_rank(v ^ mask), region(base, base + mask));
    p.recv(s, f.real_rank(v ^ mask), region(peer_base, peer_base + mask));
  }
  if (f.rem > 0 && rank < 2 * f.rem) {
    Chunk theirs = block(n, world, rank - 1);
    p.send(last, rank - 1, Chunk{Buf::kData, 0, theirs.offset});
    p.send(last, rank - 1, Chunk{Buf::kData, theirs.end(), n - theirs.end()});
  }
  p.compact();
  return p;
}

Program reduce_scatter_ring(int rank, int world, std::int64_t n, const Options&) {
  Program p;
  p.algorithm = "ring";
  ring_reduce_scatter(p, 0, all_ranks(world), rank, Chunk{Buf::kData, 0, n});
  p.compact();
  return p;
}

Program reduce_scatter_recursive_halving(int rank, int world, std::int64_t n, const Options&) {
  Program p;
  p.algorithm = "recursive_halving";
  Folding f(world);
  Chunk all{Buf::kData, 0, n};
  auto region = [&](int vlo, int vhi) { return f.real_blocks(n, vlo, vhi); };
  const size_t last = (f.rem > 0 ? 1 : 0) + static_cast<size_t>(ceil_log2(f.p));
  if (f.folded_away(rank)) {
    p.send(0, rank + 1, all);
    p.recv(last, rank + 1, block(n, world, rank));
    p.compact();
    return p;
  }
  size_t s = 0;
  if (f.rem > 0) {
    if (rank < 2 * f.rem) p.recv_reduce(0, rank - 1, all);
    s = 1;
  }
  halving_reduce_scatter(p, s, f, f.virtual_rank(rank), region);
  if (f.rem > 0 && rank < 2 * f.rem) p.send(last, rank - 1, block(n, world, rank - 1));
  p.compact();
  return p;
}

Program alltoall_pairwise(int rank, int world, std::int64_t n, const Options&) {
  Program p;
  p.algorithm = "pairwise";
  p.copy(0, block(n, world, rank, Buf::kInput), block(n, world, rank));
  for (int s = 1; s < world; ++s) {
    int to = (rank + s) % world, from = (rank - s + world) % world;
    p.send(static_cast<size_t>(s), to, block(n, world, to, Buf::kInput));
    p.recv(static_cast<size_t>(s), from, block(n, world, from));
  }
  p.compact();
  return p;
}

Program barrier_dissemination(int rank, int world, std::int64_t, const Options&) {
  Program p;
  p.algorithm = "dissemination";
  int k = 0;
  for (int dist = 1; dist < world; dist <<= 1, ++k) {
    p.send(static_cast<size_t>(k), (rank + dist) % world, Chunk{Buf::kData, 0, 0});
    p.recv(static_cast<size_t>(k), (rank - dist + world) % world, Chunk{Buf::kData, 0, 0});
  }
  p.compact(true);
  return p;
}

}  // namespace weft::algo
