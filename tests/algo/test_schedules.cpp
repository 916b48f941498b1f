// Every algorithm, for world sizes 1..17 and counts below, equal to and above the world,
// through the symbolic executor; plus the cost figures the docs state.
#include <gtest/gtest.h>

#include "weft/algo/allreduce.h"
#include "weft/algo/collective_facts.h"
#include "weft/algo/collectives.h"
#include "weft/algo/symbolic.h"
#include "weft/algo/trees.h"
#include "weft/util/error.h"

using namespace weft;
using namespace weft::algo;

namespace {
std::vector<std::int64_t> counts_for(Collective c, int w) {
  if (c == Collective::kAllToAll) return {0, w, 3 * w};
  if (c == Collective::kBarrier) return {0};
  return {0, 1, std::max(w - 1, 1), w, w + 1, 7 * w + 3, 100};
}

std::vector<Options> options_for(Collective c, const std::string& algo, int w) {
  std::vector<Options> out;
  if (algo == "hierarchical") {
    for (int l : {1, 2, 3, 4})
      if (w % l == 0) out.push_back(Options{0, l, 4});
    return out;
  }
  if (algo == "tree") {  // hosts of 1-4 ranks (or none), one segment or several
    for (int l : {0, 2, 3, 4})
      for (std::int64_t seg : {0, 3}) {
        Options o{0, l, 4};
        o.segment_elements = seg;
        out.push_back(o);
      }
    return out;
  }
  if (algo == "rail_rings") {  // ranks per host that divide the world, or not (one ring); rings per rail
    for (int l : {0, 2, 3, 4, 5})
      for (int k : {1, 2, 3}) {
        Options o{0, l, 4};
        o.channels_per_rail = k;
        out.push_back(o);
      }
    return out;
  }
  if (!facts(c).rooted) return {Options{}};
  for (int root : {0, w - 1, w / 2})
    for (int seg : {1, 4}) out.push_back(Options{root, 0, seg});
  return out;
}
}  // namespace

TEST(Schedules, EveryAlgorithmIsCorrectForWorldsOneToSeventeen) {
  int checked = 0;
  for (const Algorithm& a : algorithms()) {
    for (int w = 1; w <= 17; ++w) {
      for (const Options& o : options_for(a.collective, a.name, w)) {
        for (std::int64_t n : counts_for(a.collective, w)) {
          SymbolicResult r = verify(a.collective, a.name, w, n, o);
          ASSERT_TRUE(r.ok) << collective_name(a.collective) << "/" << a.name << " world " << w << " n " << n
                            << " root " << o.root << " local " << o.local_world << ": " << r.error;
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 2000);
}

// The facts every user of a collective reads (communicator, comm-bench, tracer, simulator).
TEST(CollectiveFacts, NamesRootsReductionsSizesAndBusFactors) {
  for (Collective c : all_collectives()) {
    EXPECT_EQ(parse_collective(facts(c).name), c);
    // A program over data_elements(count) elements exists for every algorithm of it.
    for (const Algorithm& a : algorithms()) {
      if (a.collective != c) continue;
      for (int w : {1, 3, 4}) {
        const std::int64_t count = c == Collective::kBarrier ? 0 : 5;
        EXPECT_NO_THROW(build_program(c, a.name, 0, w, data_elements(c, count, w), options_for(c, a.name, w)[0]))
            << facts(c).name << "/" << a.name << " on " << w;
      }
    }
    EXPECT_EQ(busbw_factor(c, 1), 0.0) << facts(c).name << ": nothing crosses a link on one rank";
  }
  EXPECT_TRUE(facts(Collective::kReduce).rooted && facts(Collective::kReduce).reduces);
  EXPECT_TRUE(facts(Collective::kReduceScatter).reduces && !facts(Collective::kReduceScatter).rooted);
  EXPECT_FALSE(facts(Collective::kAllGather).reduces || facts(Collective::kAllGather).rooted);
  EXPECT_EQ(data_elements(Collective::kAllGather, 5, 4), 20);
  EXPECT_EQ(data_elements(Collective::kAllReduce, 5, 4), 5);
  EXPECT_EQ(data_elements(Collective::kBarrier, 5, 4), 0);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kAllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kReduceScatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kBroadcast, 4), 1.0);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kBarrier, 4), 0.0);
}

TEST(Schedules, OutOfPlaceAllReducesReadTheInputUntilWritten) {
  // kData starts undefined: reading it before writing it, or reducing into it, fails.
  int checked = 0;
  for (const Algorithm& a : algorithms()) {
    if (a.collective != Collective::kAllReduce) continue;
    for (int w = 1; w <= 17; ++w) {
      for (Options o : options_for(a.collective, a.name, w)) {
        o.out_of_place = true;
        for (std::int64_t n : counts_for(a.collective, w)) {
          SymbolicResult r = verify(a.collective, a.name, w, n, o);
          ASSERT_TRUE(r.ok) << a.name << " world " << w << " n " << n << " local " << o.local_world << ": "
                            << r.error;
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 500);
  // The ring copies nothing in: every element is first either sent from the input or
  // received-and-reduced with it, or overwritten.
  for (int w : {2, 3, 4, 8}) {
    Options o;
    o.out_of_place = true;
    Program p = build_program(Collective::kAllReduce, "ring", 1, w, 48 * w + 5, o);
    for (const Step& s : p.steps)
      for (const Op& op : s.ops) EXPECT_NE(op.kind, OpKind::kCopy) << "world " << w;
  }
  // A world of one only copies.
  Options o;
  o.out_of_place = true;
  Program one = build_program(Collective::kAllReduce, "ring", 0, 1, 10, o);
  ASSERT_EQ(one.steps.size(), 1u);
  EXPECT_EQ(one.steps[0].ops[0].kind, OpKind::kCopy);
  EXPECT_EQ(one.steps[0].ops[0].dst.count, 10);
  EXPECT_THROW(build_program(Collective::kBroadcast, "binomial", 0, 4, 10, o), ConfigError);
}

TEST(Schedules, RingAllReduceIsBandwidthOptimal) {
  for (int w : {2, 3, 4, 8, 16}) {
    std::int64_t n = 48 * w;
    SymbolicResult r = verify(Collective::kAllReduce, "ring", w, n);
    ASSERT_TRUE(r.ok);
    EXPECT_EQ(r.max_steps, static_cast<size_t>(2 * (w - 1)));
    EXPECT_EQ(r.max_elements_sent, 2 * (w - 1) * n / w);  // 2(W-1)/W * n
  }
}

TEST(Schedules, CostsOfTheOtherAlgorithms) {
  const std::int64_t n = 4096;
  // Relay ring (seed 003): 2(W-1) transfers of the whole buffer, one after another.
  auto relay = verify(Collective::kAllReduce, "relay_ring", 5, n);
  EXPECT_EQ(relay.messages, 2 * (5 - 1));
  EXPECT_EQ(relay.max_elements_sent, 2 * n);  // rank 0 forwards in both phases
  // Direct (seed 003 chapter 4): two message rounds; each rank sends (W-1)/W n twice.
  auto direct = verify(Collective::kAllReduce, "direct", 4, n);
  EXPECT_EQ(direct.max_elements_sent, 2 * 3 * n / 4);
  EXPECT_EQ(direct.messages, 4 * 3 * 2);
  // Recursive doubling: log2(W) exchanges of n; Rabenseifner: 2(W-1)/W n for powers of two.
  auto rd = verify(Collective::kAllReduce, "recursive_doubling", 8, n);
  EXPECT_EQ(rd.max_elements_sent, 3 * n);
  auto rab = verify(Collective::kAllReduce, "rabenseifner", 8, n);
  EXPECT_EQ(rab.max_elements_sent, 2 * 7 * n / 8);
  // Binomial broadcast: ceil(log2 W) steps at the root.
  auto bin = verify(Collective::kBroadcast, "binomial", 13, n);
  EXPECT_EQ(bin.max_steps, 4u);
  EXPECT_EQ(bin.messages, 12);
  // Pipelined chain: W - 2 + segments steps.
  auto chain = verify(Collective::kBroadcast, "chain", 6, n, Options{0, 0, 8});
  EXPECT_EQ(chain.max_steps, 8u + 1);  // a middle rank: 8 receives and 8 sends over 9 steps
  // Hierarchical: 2 hosts x 4 ranks moves (L-1)/L n within hosts and 2 (H-1)/H n/L across.
  auto h = verify(Collective::kAllReduce, "hierarchical", 8, n, Options{0, 4, 4});
  EXPECT_EQ(h.max_elements_sent, 2 * 3 * n / 4 + 2 * 1 * (n / 4) / 2);
  // Dissemination barrier: ceil(log2 W) rounds.
  auto bar = verify(Collective::kBarrier, "dissemination", 9, 0);
  EXPECT_EQ(bar.max_steps, 4u);
}

// The executor catches broken programs.
namespace {
Program double_counting(int rank, int world, std::int64_t n, const Options& o) {
  Program p = allreduce_ring(rank, world, n, o);  // then reduces the finished sums once more
  std::size_t s = p.steps.size();
  p.send(s, (rank + 1) % world, Chunk{Buf::kData, 0, n});
  p.recv(s, (rank + world - 1) % world, Chunk{Buf::kScratch, 0, n});
  p.reduce(s + 1, Chunk{Buf::kScratch, 0, n}, Chunk{Buf::kData, 0, n});
  p.need_scratch(n);
  return p;
}
Program deadlocking(int rank, int world, std::int64_t n, const Options&) {
  Program p;  // everyone receives first
  p.recv(0, (rank + world - 1) % world, Chunk{Buf::kData, 0, n});
  p.send(1, (rank + 1) % world, Chunk{Buf::kData, 0, n});
  return p;
}
Program racing(int rank, int world, std::int64_t n, const Options&) {
  Program p;  // sends and overwrites the same elements in one step
  p.send(0, (rank + 1) % world, Chunk{Buf::kData, 0, n});
  p.recv(0, (rank + world - 1) % world, Chunk{Buf::kData, 0, n});
  return p;
}
Program mismatched(int rank, int world, std::int64_t n, const Options&) {
  Program p;
  p.send(0, (rank + 1) % world, Chunk{Buf::kData, 0, n});
  p.recv(0, (rank + world - 1) % world, Chunk{Buf::kScratch, 0, n - 1});
  p.need_scratch(n);
  return p;
}
Program incomplete(int rank, int world, std::int64_t n, const Options& o) {
  Program p = allreduce_ring(rank, world, n, o);
  p.steps.pop_back();  // forgets the last all-gather step
  return p;
}
}  // namespace

// Rings per rail (NCCL's channels per NIC): k rings on each rail's order, each carrying an
// equal share, every hop between hosts on the sender's rail.
TEST(Schedules, RailRingsRunSeveralChannelsPerRail) {
  const int world = 16, local = 4;  // an even number of hosts: no hop closes a ring off its rail
  const std::int64_t n = 3840;      // every channel's share splits into 16 equal blocks
  for (int k : {1, 2, 3}) {
    Options o{0, local, 4};
    o.channels_per_rail = k;
    for (int rank = 0; rank < world; ++rank) {
      const Program p = build_program(Collective::kAllReduce, "rail_rings", rank, world, n, o);
      ASSERT_EQ(channel_count(p), static_cast<std::size_t>(local * k)) << "k " << k;
      std::vector<std::int64_t> sent(static_cast<std::size_t>(local * k), 0);
      for (const Step& s : p.steps)
        for (const Op& op : s.ops) {
          if (op.kind != OpKind::kSend) continue;
          sent[op.channel] += op.src.count;
          if (op.peer / local != rank / local) {  // between hosts: on one rail
            EXPECT_EQ(op.peer % local, rank % local) << "k " << k << " rank " << rank << " channel " << op.channel;
          }
        }
      for (std::int64_t b : sent) EXPECT_EQ(b, sent[0]) << "k " << k << ": every channel carries an equal share";
      // A ring of 16 moves 2 x 15/16 of its share.
      EXPECT_EQ(sent[0] * local * k, 2 * (world - 1) * n / world) << "k " << k;
    }
  }
}

TEST(Schedules, ExecutorRejectsBrokenPrograms) {
  auto expect_error = [](Builder b, const std::string& fragment) {
    SymbolicResult r = verify(Collective::kAllReduce, b, 4, 16);
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find(fragment), std::string::npos) << r.error;
  };
  expect_error(double_counting, "twice");
  expect_error(deadlocking, "deadlock");
  expect_error(racing, "race");
  expect_error(mismatched, "receives 15 elements");
  expect_error(incomplete, "expected");
}

TEST(Schedules, BadArgumentsAreConfigErrors) {
  EXPECT_THROW(build_program(Collective::kAllReduce, "ring", 4, 4, 10), ConfigError);
  EXPECT_THROW(build_program(Collective::kAllReduce, "ring", 0, 0, 10), ConfigError);
  EXPECT_THROW(build_program(Collective::kAllReduce, "nope", 0, 2, 10), ConfigError);
  EXPECT_THROW(build_program(Collective::kBroadcast, "binomial", 0, 2, 10, Options{5, 0, 1}), ConfigError);
  EXPECT_THROW(build_program(Collective::kAllToAll, "pairwise", 0, 3, 10), ConfigError);
  EXPECT_THROW(build_program(Collective::kAllReduce, "hierarchical", 0, 6, 10, Options{0, 4, 1}), ConfigError);
  EXPECT_THROW(parse_collective("allreduse"), ConfigError);
  EXPECT_EQ(parse_collective("reduce_scatter"), Collective::kReduceScatter);
}

// --- pipeline schedules ---
#include "weft/algo/pipeline.h"

TEST(PipelineSchedules, EveryScheduleCompletesWithMatchedMessages) {
  using weft::algo::PipeSchedule;
  for (PipeSchedule s : {PipeSchedule::kNaive, PipeSchedule::kGpipe, PipeSchedule::k1F1B, PipeSchedule::kUpdatePerMicroBatch})
    for (int stages = 1; stages <= 8; ++stages)
      for (int micro = 1; micro <= 12; ++micro) EXPECT_NO_THROW(weft::algo::simulate_pipeline(s, stages, micro)) << stages << " " << micro;
  for (int stages = 1; stages <= 8; ++stages)
    for (int chunks = 2; chunks <= 4; ++chunks)
      for (int micro = stages; micro <= 3 * stages; micro += stages)
        EXPECT_NO_THROW(weft::algo::simulate_pipeline(PipeSchedule::kInterleaved, stages, micro, chunks))
            << stages << " " << chunks << " " << micro;
}

TEST(PipelineSchedules, BubblesMatchTheFormulas) {
  using weft::algo::PipeSchedule;
  for (int S : {2, 4, 8})
    for (int M : {1, 4, 8, 16}) {
      double formula = double(S - 1) / (M + S - 1);
      // GPipe and 1F1B: (S - 1) / (M + S - 1) with forward 1 and backward 2.
      EXPECT_NEAR(weft::algo::simulate_pipeline(PipeSchedule::kGpipe, S, M).bubble, formula, 1e-12) << S << " " << M;
      EXPECT_NEAR(weft::algo::simulate_pipeline(PipeSchedule::k1F1B, S, M).bubble, formula, 1e-12) << S << " " << M;
      // Naive: one stage busy at a time.
      EXPECT_NEAR(weft::algo::simulate_pipeline(PipeSchedule::kNaive, S, M).bubble, 1.0 - 1.0 / S, 1e-12);
    }
  // 1F1B holds at most S micro-batches of activations on a stage; GPipe holds all M.
  EXPECT_EQ(weft::algo::simulate_pipeline(PipeSchedule::k1F1B, 4, 16).peak_in_flight, 4);
  EXPECT_EQ(weft::algo::simulate_pipeline(PipeSchedule::kGpipe, 4, 16).peak_in_flight, 16);
  // Interleaving with v chunks divides the bubble by about v (Narayanan et al. 2021).
  double plain = weft::algo::simulate_pipeline(PipeSchedule::k1F1B, 4, 8).bubble;
  double inter = weft::algo::simulate_pipeline(PipeSchedule::kInterleaved, 4, 8, 2, 0.5, 1.0).bubble;
  EXPECT_LT(inter, plain * 0.65);
  EXPECT_THROW(weft::algo::pipeline_program(PipeSchedule::kInterleaved, 0, 4, 6, 2), weft::ConfigError);
  EXPECT_THROW(weft::algo::pipeline_program(PipeSchedule::k1F1B, 0, 4, 6, 2), weft::ConfigError);
  EXPECT_THROW(weft::algo::parse_pipe_schedule("zigzag"), weft::ConfigError);
}

TEST(PipelineSchedules, SeedScheduleUpdatesAfterEachMicroBatch) {
  auto p = weft::algo::pipeline_program(weft::algo::PipeSchedule::kUpdatePerMicroBatch, 1, 2, 4);
  int steps = 0;
  for (std::size_t i = 0; i < p.size(); ++i)
    if (p[i].kind == weft::algo::PipeOpKind::kStep) {
      ++steps;
      EXPECT_EQ(p[i - 1].kind, weft::algo::PipeOpKind::kSendGrad);  // right after its backward
    }
  EXPECT_EQ(steps, 4);
}

// NCCL-style trees from the host layout: every tree spans the world, chains stay within a
// host, hops between hosts stay on one rail, and the two trees of a channel are complementary.
TEST(Trees, HostChainTreesSpanTheWorldOnRails) {
  for (auto [world, local] : {std::pair{16, 4}, std::pair{64, 8}, std::pair{12, 3}, std::pair{7, 0}, std::pair{8, 8}}) {
    const std::vector<RankTree> trees = host_chain_trees(world, local);
    const int l = local > 1 ? local : 1, hosts = world / l;
    ASSERT_EQ(static_cast<int>(trees.size()), hosts > 1 ? 2 * l : l) << world << "/" << local;
    std::vector<int> interior(static_cast<std::size_t>(hosts), 0);
    for (std::size_t t = 0; t < trees.size(); ++t) {
      const RankTree& tree = trees[t];
      int roots = 0;
      for (int r = 0; r < world; ++r) {
        int up = tree.parent[r];
        if (up < 0) {
          ++roots;
          continue;
        }
        // Following parents reaches the root within world hops (no cycle).
        int hops = 0;
        for (int v = r; v >= 0 && hops <= world; v = tree.parent[v]) ++hops;
        EXPECT_LE(hops, world);
        if (up / l != r / l) {
          EXPECT_EQ(up % l, r % l) << "an edge between hosts leaves its rail";
          EXPECT_EQ(r % l, static_cast<int>(t) / (hosts > 1 ? 2 : 1)) << "channel c joins hosts at local rank c";
          if (t % 2 == 0 || hosts == 1) ++interior[static_cast<std::size_t>(up / l)];
        }
      }
      EXPECT_EQ(roots, 1);
    }
    if (hosts >= 4) {
      // NCCL's double binary tree: a host with children in tree A (channel 0's first) has none
      // in tree B, but for position 0 when the hosts are odd.
      const RankTree& b = trees[1];
      int both = 0;
      for (int h = 0; h < hosts; ++h) {
        bool interior_b = false;
        for (int r = 0; r < world; ++r)
          if (b.parent[r] >= 0 && b.parent[r] / l == h && r / l != h) interior_b = true;
        both += interior[static_cast<std::size_t>(h)] > 0 && interior_b ? 1 : 0;
      }
      EXPECT_LE(both, hosts % 2) << world << "/" << local;
    }
  }
}

TEST(Trees, DoubleBinaryTreesAreComplementary) {
  // NCCL's trees over 16 positions: 0 the root with one child (8), the odd positions leaves;
  // the second tree mirrored; over 7, shifted by one.
  EXPECT_EQ(double_tree_parent(16, 0, false), -1);
  EXPECT_EQ(double_tree_parent(16, 8, false), 0);
  EXPECT_EQ(double_tree_parent(16, 4, false), 8);
  EXPECT_EQ(double_tree_parent(16, 12, false), 8);
  EXPECT_EQ(double_tree_parent(16, 3, false), 2);
  EXPECT_EQ(double_tree_parent(16, 15, true), -1);
  EXPECT_EQ(double_tree_parent(16, 7, true), 15);
  EXPECT_EQ(double_tree_parent(7, 1, true), -1);
  for (int n = 1; n <= 40; ++n) {
    for (bool second : {false, true}) {
      std::vector<int> children(static_cast<std::size_t>(n), 0);
      int roots = 0;
      for (int v = 0; v < n; ++v) {
        const int up = double_tree_parent(n, v, second);
        if (up < 0) {
          ++roots;
          continue;
        }
        ASSERT_TRUE(up >= 0 && up < n && up != v) << n << "/" << v;
        ++children[static_cast<std::size_t>(up)];
        int hops = 0;  // no cycle: the root within n hops
        for (int u = v; u >= 0 && hops <= n; u = double_tree_parent(n, u, second)) ++hops;
        EXPECT_LE(hops, n);
      }
      EXPECT_EQ(roots, 1) << n;
      for (int c : children) EXPECT_LE(c, 2) << n;
    }
    int both = 0;
    for (int v = 0; v < n; ++v) {
      bool a = false, b = false;
      for (int u = 0; u < n; ++u) {
        a = a || double_tree_parent(n, u, false) == v;
        b = b || double_tree_parent(n, u, true) == v;
      }
      both += a && b ? 1 : 0;
    }
    EXPECT_LE(both, n % 2) << n;
  }
}

TEST(Trees, PipelinedTreeOverlapsSegmentsAndMovesTwoBuffersPerRank) {
  // 4 hosts of 4 ranks, 4 channels: each of the 8 trees carries 1/8 of the data, which a rank
  // sends up once and down to each of its children (at most 3): at most 2n in all.
  const std::int64_t n = 8 * 1024;
  Options o{0, 4, 4};
  auto one = verify(Collective::kAllReduce, "tree", 16, n, o);
  ASSERT_TRUE(one.ok) << one.error;
  o.segment_elements = 64;  // 16 segments per tree
  auto piped = verify(Collective::kAllReduce, "tree", 16, n, o);
  ASSERT_TRUE(piped.ok) << piped.error;
  EXPECT_EQ(piped.max_elements_sent, one.max_elements_sent);
  EXPECT_LE(one.max_elements_sent, 2 * n);
  // Pipelined: 16 segments take far fewer than 16 times the steps of one (59 against 11).
  EXPECT_LT(piped.max_steps, 16 * one.max_steps / 2);
  EXPECT_GT(piped.max_steps, one.max_steps);
}

namespace {
// The tree built whole, as the reference for place_in_binary_tree.
struct BinaryTree {
  std::vector<int> parent, left, right, height;
  int root = -1;
  explicit BinaryTree(int n) : parent(n, -1), left(n, -1), right(n, -1), height(n, 0) { root = build(0, n, -1); }
  int build(int lo, int hi, int up) {
    if (lo >= hi) return -1;
    const int mid = (lo + hi) / 2;
    parent[mid] = up;
    left[mid] = build(lo, mid, mid);
    right[mid] = build(mid + 1, hi, mid);
    for (int c : {left[mid], right[mid]})
      if (c >= 0) height[mid] = std::max(height[mid], height[c] + 1);
    return mid;
  }
  bool is_right_child(int v) const { return parent[v] >= 0 && right[parent[v]] == v; }
};
}  // namespace

TEST(Trees, PlacesInTheBinaryTreeMatchTheBuiltTree) {
  for (int n : {1, 2, 3, 5, 8, 13, 64, 100, 1000}) {
    const BinaryTree t(n);
    for (int v = 0; v < n; ++v) {
      const TreePlace p = place_in_binary_tree(n, v);
      ASSERT_EQ(p.parent, t.parent[v]) << n << "/" << v;
      EXPECT_EQ(p.left, t.left[v]);
      EXPECT_EQ(p.right, t.right[v]);
      EXPECT_EQ(p.height, t.height[v]);
      EXPECT_EQ(p.root_height, t.height[t.root]);
      EXPECT_EQ(p.right_child, t.is_right_child(v));
      EXPECT_EQ(p.parent_height, p.parent >= 0 ? t.height[p.parent] : 0);
      EXPECT_EQ(p.left_height, p.left >= 0 ? t.height[p.left] : 0);
      EXPECT_EQ(p.right_height, p.right >= 0 ? t.height[p.right] : 0);
    }
  }
}
