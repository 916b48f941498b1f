#include "weft/comm/links.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "weft/comm/auth.h"
#include "weft/comm/tls.h"
#include "weft/comm/process.h"
#include "weft/comm/socket.h"
#include "weft/util/env.h"
#include "weft/util/error.h"

namespace weft::comm {

std::string host_id() {
  if (auto forced = env_string("WEFT_HOST_ID")) return "forced/" + *forced;
  std::string boot;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, boot);
  return host_name() + "/" + boot;
}

std::string join_ranks(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

bool is_loopback(const std::string& addr) { return addr == "localhost" || addr.rfind("127.", 0) == 0; }
std::string bind_address_for(const std::string& master_addr) { return is_loopback(master_addr) ? "127.0.0.1" : "0.0.0.0"; }

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  return out;
}

// What a rank publishes at the rendezvous.
struct Endpoint {
  std::string ip, host, cores;
  int port = 0, pid = 0;
  std::vector<std::pair<std::string, int>> lanes{};  // WEFT_STRIPE_ADDRS: where connections 2, 3, ... go
};

std::string key_base(const LinkRequest& r) { return r.session + "/" + r.prefix + "/"; }

// 1. Publish this rank's endpoint; gather everyone's.
std::vector<Endpoint> exchange_endpoints(const LinkRequest& r, int port, const std::vector<int>& lane_ports,
                                         const std::string& my_host) {
  const int me = r.members[static_cast<std::size_t>(r.rank)];
  std::string my_cores, lanes;
  for (int c : allowed_cores()) {
    if (!my_cores.empty()) my_cores += ',';
    my_cores += std::to_string(c);
  }
  for (std::size_t k = 0; k < lane_ports.size(); ++k) {
    if (!lanes.empty()) lanes += ',';
    lanes += r.stripe_addresses[k] + ":" + std::to_string(lane_ports[k]);
  }
  r.store->set(key_base(r) + "ep/" + std::to_string(me), r.store->local_address() + "|" + std::to_string(port) + "|" +
                                                             my_host + "|" + std::to_string(::getpid()) + "|" + my_cores +
                                                             "|" + lanes);
  std::vector<std::string> keys;
  for (int g : r.members) keys.push_back(key_base(r) + "ep/" + std::to_string(g));
  auto missing = r.store->wait_all(keys, r.timeout_s);
  if (!missing.empty()) {
    std::vector<int> ranks;
    for (const auto& k : missing) ranks.push_back(std::stoi(k.substr(k.rfind('/') + 1)));
    throw CommError("rendezvous of " + r.group + ": rank" + (ranks.size() > 1 ? "s " : " ") + join_ranks(ranks) +
                        " did not join within " + std::to_string(static_cast<int>(r.timeout_s)) + " s",
                    "rendezvous", me, ranks.front(), r.timeout_s);
  }
  std::vector<Endpoint> eps(r.members.size());
  for (std::size_t i = 0; i < eps.size(); ++i) {
    const std::string record = *r.store->get(keys[i], r.timeout_s);
    auto parts = split(record, '|');
    if (!record.empty() && record.back() == '|') parts.emplace_back();  // (no lanes)
    if (parts.size() != 6) throw CommError("rendezvous: malformed endpoint of rank " + std::to_string(r.members[i]));
    eps[i] = {parts[0], parts[2], parts[4], std::stoi(parts[1]), std::stoi(parts[3])};
    for (const std::string& lane : split(parts[5], ',')) {
      const std::size_t colon = lane.rfind(':');
      if (colon == std::string::npos) throw CommError("rendezvous: malformed endpoint of rank " + std::to_string(r.members[i]));
      eps[i].lanes.emplace_back(lane.substr(0, colon), std::stoi(lane.substr(colon + 1)));
    }
  }
  return eps;
}

// 2. Ranks per host, and (the world group) whether the job's ranks on this host outnumber
// the cores they may run on: then a waiting rank yields the core at once instead of
// spinning on it first. A property of the job's processes, not of a group: sub-groups take
// the world's.
void note_hosts(GroupLinks& links, const LinkRequest& r, const std::vector<Endpoint>& eps, const std::string& my_host) {
  const int n = static_cast<int>(eps.size());
  for (const Endpoint& e : eps) links.host_of.push_back(e.host);
  if (r.judge_core_sharing) {
    std::set<std::string> used;
    int on_host = 0;
    for (const Endpoint& e : eps) {
      if (e.host != my_host) continue;
      ++on_host;
      for (const auto& c : split(e.cores, ',')) used.insert(c);
    }
    links.wait.shares_core = on_host > static_cast<int>(used.size());
    links.wait.ranks_on_host = on_host;
  }
  // Ranks per host, when every host holds the same number of consecutive ranks: the same
  // answer on every rank (a host's own count alone would differ between hosts of 2 and 1).
  std::map<std::string, int> per_host;
  for (const Endpoint& e : eps) ++per_host[e.host];
  const int local = per_host[my_host];
  bool regular = n % local == 0;
  for (const auto& [host, count] : per_host) regular = regular && count == local;
  for (int i = 0; i < n && regular; ++i) regular = eps[i].host == eps[(i / local) * local].host;
  links.local_world = regular ? local : 0;
}

// 3. A transport per peer: shared memory on this host (auto), or as WEFT_TRANSPORT says.
std::vector<bool> choose_shared_memory(const LinkRequest& r, const std::vector<Endpoint>& eps, const std::string& my_host) {
  std::vector<bool> use_shm(eps.size(), false);
  for (std::size_t i = 0; i < eps.size(); ++i) {
    if (static_cast<int>(i) == r.rank) continue;
    const bool same_host = eps[i].host == my_host;
    if (r.transport == "shm" && !same_host)
      throw ConfigError("WEFT_TRANSPORT=shm, but rank " + std::to_string(r.members[i]) + " runs on another host");
    use_shm[i] = r.transport == "shm" || (r.transport == "auto" && same_host);
  }
  return use_shm;
}

// 4. Shared memory: this rank's segment holds one incoming ring per local peer.
void connect_shared_memory(GroupLinks& links, const LinkRequest& r, const std::vector<bool>& use_shm,
                           const std::vector<Endpoint>& eps) {
  const int n = static_cast<int>(eps.size()), me = r.members[static_cast<std::size_t>(r.rank)];
  std::vector<int> local_index(eps.size(), -1);
  int locals = 0;
  for (int i = 0; i < n; ++i)
    if (i == r.rank || use_shm[i]) local_index[i] = locals++;
  if (locals <= 1) return;
  // Named after the group, the rank and the creating process ("...-p<pid>"): the launcher
  // removes the segments of a child that died before unlinking them (launcher.cpp).
  auto seg_name = [&](int i) {
    return r.session + "-" + std::to_string(std::hash<std::string>{}(r.prefix)) + "-" + std::to_string(r.members[i]) +
           "-p" + std::to_string(eps[i].pid);
  };
  links.my_segment = ShmSegment::create(seg_name(r.rank), locals, r.shm_ring_bytes);
  links.bell = &links.my_segment->doorbell();
  r.store->set(key_base(r) + "shm/" + std::to_string(me), "1");
  links.peer_segments.resize(eps.size());
  for (int i = 0; i < n; ++i) {
    if (!use_shm[i]) continue;
    if (!r.store->get(key_base(r) + "shm/" + std::to_string(r.members[i]), r.timeout_s))
      throw CommError("rendezvous: rank " + std::to_string(r.members[i]) + " did not create its shared memory");
    links.peer_segments[i] = ShmSegment::open(seg_name(i));
    ShmSegment& peer = *links.peer_segments[i];
    peer.populate_slot(local_index[r.rank]);
    auto ch = std::make_unique<ShmChannel>(peer.ring(local_index[r.rank]), peer.ring_data(local_index[r.rank]),
                                           links.my_segment->ring(local_index[i]), links.my_segment->ring_data(local_index[i]),
                                           links.my_segment->ring_bytes(), peer.doorbell(), eps[i].pid);
    links.peers[i].channel = ch.get();
    links.peers[i].pid = eps[i].pid;
    links.channels.push_back(std::move(ch));
    ++links.shm;
  }
}

// How many TCP connections go to group rank i: one to a peer not on shared memory (N with
// WEFT_STRIPE=tcp:N), none to one on it (one with shm+tcp).
int tcp_connections(const LinkRequest& r, const std::vector<bool>& use_shm, std::size_t i) {
  if (use_shm[i]) return r.shm_and_tcp ? 1 : 0;
  return r.tcp_connections;
}
// A connection's identity in the handshake: the global rank, and which of the pair's TCP
// connections it is in the top bits.
constexpr int kLaneShift = 24;

// 5. TCP: the lower group rank connects, the higher accepts (in a thread of its own); a
// connection that fails the token handshake, or comes from a rank not expected, is refused.
// A peer's first connection is its channel (unless shared memory is), the others its lanes.
void connect_tcp_peers(GroupLinks& links, const LinkRequest& r, const std::vector<Socket>& listeners,
                       const std::vector<bool>& use_shm, const std::vector<Endpoint>& eps) {
  const int n = static_cast<int>(eps.size()), me = r.members[static_cast<std::size_t>(r.rank)];
  std::vector<std::vector<Socket>> accepted(eps.size());
  for (std::size_t i = 0; i < eps.size(); ++i)
    if (static_cast<int>(i) != r.rank) accepted[i].resize(static_cast<std::size_t>(tcp_connections(r, use_shm, i)));
  // Where a lower rank's connection `lane` comes in: listener `lane` when this rank has an
  // address for it (WEFT_STRIPE_ADDRS), else the main one (0).
  const auto listener_of = [&](std::size_t lane) { return lane < listeners.size() ? lane : 0; };
  std::vector<int> expected(listeners.size(), 0);
  for (int i = 0; i < r.rank; ++i)
    for (std::size_t lane = 0; lane < accepted[static_cast<std::size_t>(i)].size(); ++lane) ++expected[listener_of(lane)];
  std::vector<std::vector<bool>> claimed(eps.size());
  for (std::size_t i = 0; i < eps.size(); ++i) claimed[i].assign(accepted[i].size(), false);
  std::mutex claims;
  std::vector<std::exception_ptr> accept_errors(listeners.size());
  const auto index_of = [&](std::uint32_t who) {
    auto it = std::find(r.members.begin(), r.members.end(), static_cast<int>(who & ((1u << kLaneShift) - 1)));
    return static_cast<std::size_t>(it - r.members.begin());
  };
  std::vector<std::thread> acceptors;
  for (std::size_t l = 0; l < listeners.size(); ++l) {
    if (expected[l] == 0) continue;
    acceptors.emplace_back([&, l] {
      try {
        // Handshakes side by side: a silent or hostile connection holds only its own slot.
        auto wanted = [&](std::uint32_t who) {
          const std::size_t idx = index_of(who), lane = who >> kLaneShift;
          std::lock_guard<std::mutex> lock(claims);
          if (idx >= r.members.size() || static_cast<int>(idx) >= r.rank) return false;
          if (lane >= claimed[idx].size() || claimed[idx][lane] || listener_of(lane) != l) return false;
          claimed[idx][lane] = true;
          return true;
        };
        for (const AcceptedPeer& a : accept_authenticated(listeners[l].fd(), r.token, Purpose::kPeer,
                                                          static_cast<std::uint32_t>(me), expected[l], wanted, r.timeout_s,
                                                          10.0, "weft rank " + std::to_string(me))) {
          std::lock_guard<std::mutex> lock(claims);
          accepted[index_of(a.identity)][a.identity >> kLaneShift] = Socket(a.fd);
        }
      } catch (const CommError& e) {
        accept_errors[l] = std::make_exception_ptr(CommError("rendezvous of " + r.group + ": " + e.what()));
      } catch (...) {
        accept_errors[l] = std::current_exception();
      }
    });
  }
  std::exception_ptr connect_error;
  try {
    for (int i = r.rank + 1; i < n; ++i) {
      for (std::size_t lane = 0; lane < accepted[static_cast<std::size_t>(i)].size(); ++lane) {
        // The peer's address for this connection: its own for the lane, or its main one.
        const bool own = lane > 0 && lane <= eps[i].lanes.size();
        Socket s = connect_tcp(own ? eps[i].lanes[lane - 1].first : eps[i].ip, own ? eps[i].lanes[lane - 1].second : eps[i].port,
                               Deadline::in(r.timeout_s));
        const auto identity = static_cast<std::uint32_t>(me) | static_cast<std::uint32_t>(lane << kLaneShift);
        connect_handshake(s.fd(), r.token, Purpose::kPeer, identity, 10.0);
        accepted[static_cast<std::size_t>(i)][lane] = std::move(s);
      }
    }
  } catch (...) {
    connect_error = std::current_exception();
  }
  for (std::thread& t : acceptors) t.join();
  if (connect_error) std::rethrow_exception(connect_error);
  for (const std::exception_ptr& e : accept_errors)
    if (e) std::rethrow_exception(e);
  std::vector<int> peers;  // one entry per connection
  for (int i = 0; i < n; ++i)
    for (std::size_t lane = 0; lane < accepted[static_cast<std::size_t>(i)].size(); ++lane) peers.push_back(i);
  std::vector<Socket> sockets;
  for (int i = 0; i < n; ++i)
    for (Socket& s : accepted[static_cast<std::size_t>(i)]) sockets.push_back(std::move(s));
  std::vector<std::unique_ptr<Channel>> channels;
  if (r.tls) {  // the side that accepted a connection serves its TLS
    std::vector<bool> server;
    for (int i : peers) server.push_back(i < r.rank);
    channels = tls_handshakes(std::move(sockets), server, r.token, r.timeout_s);
  } else {
    for (Socket& s : sockets) channels.push_back(std::make_unique<TcpChannel>(std::move(s)));
  }
  for (std::size_t k = 0; k < peers.size(); ++k) {
    PeerLink& link = links.peers[static_cast<std::size_t>(peers[k])];
    if (!link.channel) link.channel = channels[k].get();
    const auto lane_of = [](Channel* channel, std::string where) {
      Lane lane;
      lane.channel = channel;
      lane.where = std::move(where);
      return lane;
    };
    const std::string where = listening_side_address(channels[k]->fd(), peers[k] < r.rank);
    if (link.lanes.empty()) link.lanes.push_back(lane_of(link.channel, link.channel == channels[k].get() ? where : "shm"));
    if (link.channel != channels[k].get()) link.lanes.push_back(lane_of(channels[k].get(), where));
    links.channels.push_back(std::move(channels[k]));
    ++links.tcp;
  }
  for (PeerLink& link : links.peers) {
    if (link.lanes.size() < 2) link.lanes.clear();
    link.stripe_min = r.stripe_min;
  }
}

// One message of `bytes` to or from group rank `peer` over `channel` alone, through the
// executor (as the collectives move them); returns the seconds it took.
double timed_message(GroupLinks& links, const LinkRequest& r, std::size_t peer, Channel* channel, bool send,
                     std::uint8_t* data, std::int64_t bytes) {
  std::vector<PeerLink> one(links.peers.size());
  one[peer].channel = channel;
  one[peer].global_rank = links.peers[peer].global_rank;
  one[peer].pid = links.peers[peer].pid;
  algo::Program program;
  const algo::Chunk chunk{algo::Buf::kData, 0, bytes};
  if (send) program.send(0, static_cast<int>(peer), chunk);
  else program.recv(0, static_cast<int>(peer), chunk);
  ExecBuffers buffers;
  buffers.direct = {data};
  ExecContext ctx;
  ctx.op = "measuring the paths to rank " + std::to_string(one[peer].global_rank);
  ctx.rank = r.members[static_cast<std::size_t>(r.rank)];
  ctx.timeout_s = r.timeout_s;
  ctx.doorbell = links.bell;
  ctx.wait = links.wait;
  const auto t0 = std::chrono::steady_clock::now();
  execute(program, buffers, one, ctx);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// 6. The lanes' shares: as given, or measured pair by pair. Of a pair the lower rank sends
// and the higher times: per lane, a 1 MiB warm-up, then 3 times "go" from the timer and
// 8 MiB back (the fastest counts), each a message through the executor; the timer sends
// the shares (each lane's bandwidth over their sum) to the sender. Every rank takes its
// pairs in the order of (lower rank, higher rank), the same order for all, so the pair due
// first always finds both ready.
void measure_stripes(GroupLinks& links, const LinkRequest& r) {
  const std::vector<double>& given = r.stripe_shares;
  const auto set_shares = [](PeerLink& link, const std::vector<double>& shares) {
    double sum = 0;
    for (double v : shares) sum += v;
    for (std::size_t k = 0; k < link.lanes.size(); ++k) link.lanes[k].share = shares[k] / sum;
  };
  constexpr std::int64_t kWarmup = 1 << 20, kProbe = 8 << 20;
  std::vector<std::uint8_t> buffer;
  // (Pairs with lower ranks first, then higher: the global order.)
  for (std::size_t i = 0; i < links.peers.size(); ++i) {
    PeerLink& link = links.peers[i];
    if (link.lanes.empty()) continue;
    ++links.striped;
    if (!given.empty()) {
      if (given.size() != link.lanes.size())
        throw ConfigError("WEFT_STRIPE_SHARES: " + std::to_string(given.size()) + " shares for " +
                          std::to_string(link.lanes.size()) + " paths to a peer");
      set_shares(link, given);
      continue;
    }
    buffer.assign(static_cast<std::size_t>(kProbe), 1);
    const bool timer = static_cast<int>(i) < r.rank;
    std::vector<double> shares(link.lanes.size());
    for (std::size_t k = 0; k < link.lanes.size(); ++k) {
      Channel* ch = link.lanes[k].channel;
      timed_message(links, r, i, ch, !timer, buffer.data(), kWarmup);
      double best = 1e300;
      for (int repeat = 0; repeat < 3; ++repeat) {  // the fastest of 3: a busy moment slows one
        const double go = timed_message(links, r, i, ch, timer, buffer.data(), 8);
        best = std::min(best, go + timed_message(links, r, i, ch, !timer, buffer.data(), kProbe));
      }
      shares[k] = static_cast<double>(kProbe) / std::max(best, 1e-9);
    }
    auto* bytes = reinterpret_cast<std::uint8_t*>(shares.data());
    timed_message(links, r, i, link.channel, timer, bytes, static_cast<std::int64_t>(shares.size() * sizeof(double)));
    for (double v : shares)
      if (!(v > 0 && std::isfinite(v))) throw CommError("striping: a path measured no bandwidth");
    set_shares(link, shares);
  }
}

// 7. Everyone is connected: the shared-memory names can go (the mappings stay).
void finish_rendezvous(GroupLinks& links, const LinkRequest& r) {
  const int me = r.members[static_cast<std::size_t>(r.rank)];
  r.store->set(key_base(r) + "ready/" + std::to_string(me), "1");
  std::vector<std::string> ready;
  for (int g : r.members) ready.push_back(key_base(r) + "ready/" + std::to_string(g));
  if (!r.store->wait_all(ready, r.timeout_s).empty())
    throw CommError("rendezvous of " + r.group + ": not every rank finished connecting");
  if (links.my_segment) links.my_segment->unlink();
}

}  // namespace

std::unique_ptr<GroupLinks> connect_links(const LinkRequest& r) {
  auto links = std::make_unique<GroupLinks>();
  links->wait = r.wait;
  links->peers.resize(r.members.size());
  for (std::size_t i = 0; i < r.members.size(); ++i) links->peers[i].global_rank = r.members[i];
  const std::string my_host = host_id();
  int port = 0;
  std::vector<Socket> listeners;  // the main one, then one per address of WEFT_STRIPE_ADDRS
  listeners.push_back(listen_tcp(bind_address_for(r.master_addr), 0, &port));
  std::vector<int> lane_ports;
  for (const std::string& address : r.stripe_addresses) {
    lane_ports.push_back(0);
    listeners.push_back(listen_tcp(address, 0, &lane_ports.back()));
  }
  const std::vector<Endpoint> eps = exchange_endpoints(r, port, lane_ports, my_host);
  note_hosts(*links, r, eps, my_host);
  const std::vector<bool> use_shm = choose_shared_memory(r, eps, my_host);
  connect_shared_memory(*links, r, use_shm, eps);
  connect_tcp_peers(*links, r, listeners, use_shm, eps);
  measure_stripes(*links, r);
  finish_rendezvous(*links, r);
  return links;
}

}  // namespace weft::comm
