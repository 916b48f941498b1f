#include "weft/sim/in_network.h"

#include <algorithm>
#include <deque>
#include <map>

#include "weft/algo/registry.h"
#include "weft/util/error.h"

namespace weft::sim {
namespace {

// Elements per segment (256 KiB of f32, as the tree's) and the most segments a region is cut into.
constexpr std::int64_t kSegmentElements = 1 << 16;
constexpr int kMaxSegments = 64;
// Across hosts, pieces of the buffer whose phases overlap: at most this many, each at least
// four segments per GPU in the network (each piece adds the steps of a reduce-scatter and an
// all-gather within the host, and with a protocol their flag delays).
constexpr std::int64_t kMaxPieces = 8;

using algo::Chunk;
using algo::OpKind;

class Builder {
 public:
  Builder(const Topology& t, const std::vector<int>& members)
      : t_(t), adj_(t.links_by_node()), attached_(gpu_attachments(t)) {
    out_.gpus = members;
    out_.programs.resize(members.size());
  }

  // The switch a GPU reaches first: over NVLink (its NVSwitch), or over the network. -1 when
  // there is none.
  int first_switch(int member, bool nvlink) const {
    const GpuAttachment& a = attached_[static_cast<std::size_t>(out_.gpus[static_cast<std::size_t>(member)])];
    return nvlink ? a.nvswitch : a.network_switch;
  }

  // A reduction tree over `members` for `region`: the reducers of their first switches, under
  // the reducer of the switch nearest them all when there are several. The members send in
  // channel `send_in` and receive in `receive_in`.
  void reduce_in_network(const std::vector<int>& members, const Chunk& region, bool nvlink, std::uint16_t send_in = 0,
                         std::uint16_t receive_in = 1) {
    if (members.size() < 2 || region.count == 0) return;
    const auto up = static_cast<std::uint16_t>(2 * trees_), down = static_cast<std::uint16_t>(2 * trees_ + 1);
    ++trees_;
    std::map<int, std::vector<int>> groups;  // first switch -> its members
    for (int m : members) {
      const int sw = first_switch(m, nvlink);
      if (sw < 0)
        throw ConfigError("in-network all-reduce: " + t_.nodes[static_cast<std::size_t>(t_.gpus[static_cast<std::size_t>(out_.gpus[static_cast<std::size_t>(m)])])].name +
                          " has no switch to reduce in");
      groups[sw].push_back(m);
    }
    const int root_switch = groups.size() == 1 ? groups.begin()->first : nearest_switch(groups);
    const int root = reducer(root_switch);
    const int segments = static_cast<int>(
        std::clamp<std::int64_t>((region.count + kSegmentElements - 1) / kSegmentElements, 1, kMaxSegments));
    for (int s = 0; s < segments; ++s) {
      const std::int64_t b = algo::block_begin(region.count, segments, s);
      const Chunk piece{region.buf, region.offset + b, algo::block_begin(region.count, segments, s + 1) - b};
      // (rank, the channels it sends and receives in)
      std::vector<std::pair<int, std::pair<std::uint16_t, std::uint16_t>>> root_children;
      for (const auto& [sw, group] : groups) {
        const bool at_root = sw == root_switch;
        const int leaf = at_root ? root : reducer(sw);
        for (int m : group) {
          put(m, fresh(m), OpKind::kSend, leaf, piece, send_in, up);
          put(m, fresh(m), OpKind::kRecv, leaf, piece, receive_in, at_root ? up : down);
          if (at_root) root_children.push_back({m, {send_in, receive_in}});
        }
        if (at_root) continue;
        const std::size_t gather = fresh(leaf);
        for (int m : group) put(leaf, gather, OpKind::kRecvReduce, m, piece, up, send_in);
        put(leaf, fresh(leaf), OpKind::kSend, root, piece, up, up);
        put(leaf, fresh(leaf), OpKind::kRecv, root, piece, down, up);
        const std::size_t scatter = fresh(leaf);
        for (int m : group) put(leaf, scatter, OpKind::kSend, m, piece, down, receive_in);
        root_children.push_back({leaf, {up, down}});
      }
      const std::size_t gather = fresh(root), scatter = fresh(root);
      for (const auto& [child, theirs] : root_children) {
        put(root, gather, OpKind::kRecvReduce, child, piece, up, theirs.first);
        put(root, scatter, OpKind::kSend, child, piece, up, theirs.second);
      }
    }
  }

  // Appends `p` (a program over `group`, members by index, on elements from 0) to the
  // members' programs in one channel, after what they hold, its elements from `offset`.
  void append(const std::vector<int>& group, int index, const algo::Program& p, std::uint16_t channel,
              std::int64_t offset) {
    const int me = group[static_cast<std::size_t>(index)];
    for (const algo::Step& step : p.steps) {
      const std::size_t at = fresh(me);
      for (algo::Op op : step.ops) {
        if (op.peer >= 0) op.peer = group[static_cast<std::size_t>(op.peer)];
        op.channel = op.peer_channel = channel;
        op.src.offset += op.src.buf == algo::Buf::kData ? offset : 0;
        op.dst.offset += op.dst.buf == algo::Buf::kData ? offset : 0;
        out_.programs[static_cast<std::size_t>(me)].step(at).ops.push_back(op);
      }
    }
  }

  // Member `me`'s channel `to` waits until its channel `from` got here (a message of no bytes
  // within the GPU, which costs nothing).
  void signal(int me, std::uint16_t from, std::uint16_t to) {
    put(me, fresh(me), OpKind::kSend, me, Chunk{}, from, to);
    put(me, fresh(me), OpKind::kRecv, me, Chunk{}, to, from);
  }

  InNetworkAllReduce take() {
    for (algo::Program& p : out_.programs) p.compact(true);
    return std::move(out_);
  }

 private:
  int reducer(int sw) {
    auto [it, fresh_one] = reducers_.try_emplace(sw, static_cast<int>(out_.gpus.size()));
    if (fresh_one) {
      out_.gpus.push_back(t_.reducer_of[static_cast<std::size_t>(sw)]);
      out_.programs.emplace_back();
    }
    return it->second;
  }

  std::size_t fresh(int rank) { return out_.programs[static_cast<std::size_t>(rank)].steps.size(); }

  void put(int rank, std::size_t step, OpKind kind, int peer, const Chunk& c, std::uint16_t channel,
           std::uint16_t peer_channel) {
    algo::Op op{kind, peer, kind == OpKind::kSend ? c : Chunk{}, kind == OpKind::kSend ? Chunk{} : c, channel, peer_channel};
    out_.programs[static_cast<std::size_t>(rank)].step(step).ops.push_back(op);
  }

  // The network switch with the smallest greatest hop count to the groups' switches (then
  // the smallest sum, then the first).
  int nearest_switch(const std::map<int, std::vector<int>>& groups) const {
    const std::size_t n = t_.nodes.size();
    std::vector<int> worst(n, 0), sum(n, 0);
    for (const auto& group : groups) {
      std::vector<int> dist(n, -1);
      std::deque<int> queue{group.first};
      dist[static_cast<std::size_t>(group.first)] = 0;
      while (!queue.empty()) {
        const int u = queue.front();
        queue.pop_front();
        for (int l : adj_[static_cast<std::size_t>(u)]) {
          const int v = t_.other_end(l, u);
          const Node& node = t_.nodes[static_cast<std::size_t>(v)];
          if (node.kind != NodeKind::kSwitch || node.role == "nvswitch" || dist[static_cast<std::size_t>(v)] >= 0) continue;
          dist[static_cast<std::size_t>(v)] = dist[static_cast<std::size_t>(u)] + 1;
          queue.push_back(v);
        }
      }
      for (std::size_t v = 0; v < n; ++v) {
        worst[v] = dist[v] < 0 || worst[v] < 0 ? -1 : std::max(worst[v], dist[v]);
        sum[v] += dist[v];
      }
    }
    int best = -1;
    for (std::size_t v = 0; v < n; ++v) {
      if (worst[v] < 0 || t_.nodes[v].kind != NodeKind::kSwitch) continue;
      if (best < 0 || std::pair{worst[v], sum[v]} < std::pair{worst[static_cast<std::size_t>(best)], sum[static_cast<std::size_t>(best)]})
        best = static_cast<int>(v);
    }
    if (best < 0) throw ConfigError("in-network all-reduce: no switch reaches every member's switch");
    return best;
  }

  const Topology& t_;
  std::vector<std::vector<int>> adj_;  // links of each node
  std::vector<GpuAttachment> attached_;
  InNetworkAllReduce out_;
  std::map<int, int> reducers_;  // switch node -> rank
  int trees_ = 0;
};

}  // namespace

InNetworkAllReduce in_network_allreduce(const Topology& t, const std::vector<int>& members, std::int64_t n) {
  if (!t.in_network_reduction())
    throw ConfigError("the in_network all-reduce needs switches that reduce: add 'in_network_reduction: on' to the topology");
  Builder b(t, members);
  const int world = static_cast<int>(members.size());
  const int local = t.gpus_per_host;
  auto host_of = [&](int m) { return t.nodes[static_cast<std::size_t>(t.gpus[static_cast<std::size_t>(members[static_cast<std::size_t>(m)])])].host; };
  bool one_host = true, by_host = local > 1 && world % local == 0 && world > local;
  for (int m = 0; m < world; ++m) {
    one_host = one_host && host_of(m) == host_of(0);
    // Each run of `local` members on one host, a different host from the run before.
    const int first = by_host ? m / local * local : 0;
    if (by_host) by_host = host_of(m) == host_of(first) && (first == 0 || host_of(first) != host_of(first - local));
  }
  const Chunk all{algo::Buf::kData, 0, n};
  std::vector<int> everyone(static_cast<std::size_t>(world));
  for (int m = 0; m < world; ++m) everyone[static_cast<std::size_t>(m)] = m;
  if (one_host && world > 1 && b.first_switch(0, true) >= 0) {
    b.reduce_in_network(everyone, all, true);  // NVLS
  } else if (by_host) {
    // Per piece of the buffer: a reduce-scatter within each host (channel 0), each share
    // reduced across hosts by the GPUs of one local index (sent in channel 2, received in 1),
    // an all-gather within each host (channel 3). Each channel takes the pieces in order and
    // a piece's next phase waits for its last, so the phases of successive pieces overlap.
    const int hosts = world / local;
    const int pieces = static_cast<int>(std::clamp<std::int64_t>(n / (local * kSegmentElements * 4), 1, kMaxPieces));
    auto host_group = [&](int h) {
      std::vector<int> host(static_cast<std::size_t>(local));
      for (int l = 0; l < local; ++l) host[static_cast<std::size_t>(l)] = h * local + l;
      return host;
    };
    // One local rank's program within a host, the same on every host.
    auto within_host = [&](algo::Collective c, std::int64_t count) {
      std::vector<algo::Program> of_rank;
      for (int l = 0; l < local; ++l) of_rank.push_back(algo::build_program(c, "ring", l, local, count));
      return of_rank;
    };
    for (int p = 0; p < pieces; ++p) {
      const Chunk piece = algo::block(n, pieces, p);
      const std::vector<algo::Program> scatter = within_host(algo::Collective::kReduceScatter, piece.count),
                                       gather = within_host(algo::Collective::kAllGather, piece.count);
      for (int h = 0; h < hosts; ++h)
        for (int l = 0; l < local; ++l) {
          b.append(host_group(h), l, scatter[static_cast<std::size_t>(l)], 0, piece.offset);
          b.signal(h * local + l, 0, 2);
        }
      for (int l = 0; l < local; ++l) {
        std::vector<int> rail;
        for (int h = 0; h < hosts; ++h) rail.push_back(h * local + l);
        const Chunk share = algo::block(piece.count, local, l);
        b.reduce_in_network(rail, Chunk{share.buf, piece.offset + share.offset, share.count}, false, 2, 1);
      }
      for (int h = 0; h < hosts; ++h)
        for (int l = 0; l < local; ++l) {
          b.signal(h * local + l, 1, 3);
          b.append(host_group(h), l, gather[static_cast<std::size_t>(l)], 3, piece.offset);
        }
    }
  } else {
    b.reduce_in_network(everyone, all, false);
  }
  return b.take();
}

}  // namespace weft::sim
