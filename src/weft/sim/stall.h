// Why a run did not finish: the ranks still waiting and on what, a cycle of ranks each
// waiting for the next one's message (a deadlocked workload), a cycle of paused links each
// waiting for the next to drain the buffer that holds its packets (a PFC deadlock, the
// cyclic buffer dependency of seed 002 chapter 11), and the messages that have no route
// left (links or switches down).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace weft::sim {

class Network;

struct RankWait {
  int agent = -1;
  std::size_t step = 0, steps = 0;
  bool started = false;                        // its current step began (else: in its compute gap)
  std::vector<std::pair<int, int>> receives;   // (peer agent, messages still expected from it)
  std::vector<int> unacknowledged;             // peer agents of its sends not yet acknowledged
};

struct Stall {
  bool time_limit = false;                     // stopped at sim.time_limit (else: no event was left)
  std::vector<RankWait> waits;                 // every unfinished rank, by agent
  std::vector<int> rank_cycle;                 // agents, each waiting for the next one's message
  std::vector<int> pfc_cycle;                  // paused egress ports, each waiting for the next to drain
  int pfc_queue = -1;                          // the traffic class of the PFC cycle
  std::vector<std::pair<int, int>> unroutable; // (sender, receiver) agents of messages with no route
};

// A directed cycle in the graph given by adjacency lists, as its nodes in order (the edge
// from the last back to the first closes it); empty when there is none. Deterministic: the
// first cycle a depth-first search from node 0, 1, ... meets. Iterative (no recursion).
std::vector<int> find_cycle(const std::vector<std::vector<int>>& edges);

// An observer of a run that did not finish: what each unfinished rank waits on, and the
// cycles and unreachable hosts behind it, read from the agents, the routes and the ports
// where the run stopped (Network::stall() keeps it).
Stall find_stall(const Network& net, bool time_limit);

// The stall of a run that did not finish (Network::stall()) as lines for the summary: the
// first `max_ranks` waiting ranks, then the deadlock cycles and the unroutable messages.
std::vector<std::string> describe_stall(const Network& net, const Stall& stall, std::size_t max_ranks = 8);

}  // namespace weft::sim
