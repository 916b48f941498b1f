// The links of one group: the rendezvous through the store and the set-up of a channel to
// every peer, shared memory on one host and TCP across hosts (c10d's rendezvous and its
// process group's connection step).
//
//   1. exchange endpoints    each rank publishes address, port, host, pid and cores; all wait
//                            for all (missing ranks are named after the timeout)
//   2. note the hosts        ranks per host (regular blocks), and whether the job's ranks on
//                            this host outnumber their cores (a waiting rank then yields)
//   3. choose transports     shared memory on the same host (WEFT_TRANSPORT=auto), else TCP
//   4. shared memory         each rank's segment holds one incoming ring per local peer
//   5. TCP                   the lower group rank connects, the higher accepts; both sides
//                            prove the job token (auth.h)
//   6. stripes               (WEFT_STRIPE) more paths to a peer: shared memory and TCP, or
//                            several TCP connections; each pair measures its paths'
//                            bandwidth (pairs in a global order, so none waits in a cycle)
//                            and the executor splits large messages in proportion
//   7. finish                everyone connected: the shared-memory names are unlinked
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "weft/comm/channel.h"
#include "weft/comm/executor.h"
#include "weft/comm/store.h"

namespace weft::comm {

struct GroupLinks {
  std::vector<PeerLink> peers;  // by group rank
  std::vector<std::unique_ptr<Channel>> channels;
  std::unique_ptr<ShmSegment> my_segment;
  std::vector<std::unique_ptr<ShmSegment>> peer_segments;
  Doorbell* bell = nullptr;
  std::vector<std::string> host_of;  // host id per group rank
  int local_world = 0;               // ranks per host when hosts hold equal contiguous blocks, else 0
  // How the group's ranks wait (wait_policy.h): the request's settings, with whether the
  // job's ranks on this host outnumber their cores and how many they are (judged by the
  // world group, copied to its sub-groups).
  WaitSettings wait{};
  int tcp = 0, shm = 0;
  int striped = 0;  // peers reached over more than one path
};

struct LinkRequest {
  StoreClient* store = nullptr;
  std::string session;          // the job's, from the store
  std::string prefix;           // this group's keys in the store
  std::string group;            // its name, for messages ("world", "group[0, 1]")
  std::vector<int> members;     // global ranks
  int rank = 0;                 // in the group
  std::string token;            // the job token
  std::string master_addr;      // loopback: listen on loopback only
  std::string transport = "auto";  // auto | shm | tcp
  std::size_t shm_ring_bytes = 1 << 20;
  double timeout_s = 60;        // of the rendezvous
  bool judge_core_sharing = false;  // the world group decides it for all groups
  bool tls = false;             // TCP links under TLS (tls.h)
  // Striping: N TCP connections to each TCP peer, and whether a peer on this host is
  // reached over TCP too (shared memory and TCP); the lanes' shares as given (empty:
  // measured); the smallest message striped.
  int tcp_connections = 1;
  bool shm_and_tcp = false;
  std::vector<double> stripe_shares{};
  // This rank's own addresses for the 2nd, 3rd, ... TCP connection of each pair (tcp:N;
  // another interface each): it listens on each, and a peer's k-th connection comes to the
  // k-th (the others to its main address).
  std::vector<std::string> stripe_addresses{};
  std::uint64_t stripe_min = 1 << 20;
  WaitSettings wait{};  // WEFT_SPIN_US, WEFT_YIELD_US (the rest is judged here)
};

std::unique_ptr<GroupLinks> connect_links(const LinkRequest& request);

// What identifies a host: its name and boot id (WEFT_HOST_ID overrides it: tests pretend
// that ranks of one machine run on several hosts).
std::string host_id();
// "0, 2, 5"
std::string join_ranks(const std::vector<int>& ranks);
bool is_loopback(const std::string& address);
// Where a job's listening sockets bind: loopback when the job's master address is loopback
// (a single-host job is never reachable from the network), else every interface.
std::string bind_address_for(const std::string& master_addr);

}  // namespace weft::comm
