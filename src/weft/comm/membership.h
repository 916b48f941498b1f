// Live membership of an elastic job (seed 003 chapter 11, adaptive data parallelism): the
// processes of a running job change at step boundaries without a restart.
//
// A store that outlives every rank (weft launch --elastic serves it; its address reaches the
// ranks as WEFT_ELASTIC_STORE=HOST:PORT) keeps numbered generations, each the list of its
// members' ids in rank order. A group is connected per generation, under its own keys:
//
//   start    the processes launched with the job form generation 0 in their launch ranks
//   join     a process started later (weft launch --join) asks to join and waits for the
//            generation that admits it (or for the job's end)
//   propose  rank 0 of a generation publishes the next one, once the group agreed on a
//            change: the members that stay, in their order, then every joiner waiting, in
//            the order they asked (before the last members when they must stay last)
//   follow   the other members read it
//
// Keys (under live/): g<N> "admitted J: id id ..." (J: the join requests admitted so far);
// latest, the newest N (a counter); what, the job's settings; g0/<rank>, the launched ranks' ids; joins, the count of
// requests, join/<k> the k-th joiner's id; done, set when the job ends; requested and
// spawned, the processes the job asked the launchers for and those they started;
// g<N>/alive/<rank> (the steps of a survivor of generation N's failure), g<N>/alive and
// g<N>/proposer (counters).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weft/comm/communicator.h"
#include "weft/comm/store.h"

namespace weft::comm {

struct Generation {
  std::int64_t number = 0;
  std::vector<std::string> members;  // ids, in rank order
  std::int64_t admitted = 0;         // join requests admitted up to this generation
  int rank = -1;                     // this process's (-1: not a member)
  int size() const { return static_cast<int>(members.size()); }
};

// "admitted J: id id ...", and back (a record from the store: checked, CommError if malformed).
std::string generation_record(const Generation& g);
Generation parse_generation(std::int64_t number, const std::string& record, const std::string& self);

// "HOST:PORT" (a port from 1 to 65535), or ConfigError naming `what` and the text.
std::pair<std::string, int> parse_host_port(const std::string& text, const std::string& what);

class Membership {
 public:
  // Connects to `address` (HOST:PORT) with the job's token; `id` names this process (unique
  // in the job); `timeout_s` bounds each wait for the others.
  Membership(const std::string& address, const std::string& token, std::string id, double timeout_s);
  // The store of WEFT_ELASTIC_STORE, or none when the job is not elastic.
  static std::optional<std::string> address_from_env();

  // Generation 0, for a process launched with the job at `rank` of `world`; rank 0 records
  // `what` the job is (its settings that every member must share).
  Generation start(int rank, int world, const std::string& what);
  // A late process: waits until a generation admits it; none when the job ended first.
  // Throws ConfigError, before asking, when the job is not `what` this process would be.
  std::optional<Generation> join(double timeout_s, const std::string& what);
  // Join requests not yet admitted after `g` (rank 0 asks; cheap: one store request).
  std::int64_t waiting(const Generation& g);
  // Rank 0: asks the launchers with spare places for `count` more processes (they start
  // them as joiners, weft launch --nproc-per-node MIN:MAX).
  void request(std::int64_t count);
  // Rank 0: the generation after `g` without the ranks `leaving`, with every joiner waiting
  // (before the last `keep_last` members, which stay last: a parameter server's servers).
  Generation propose(const Generation& g, const std::vector<int>& leaving, int keep_last = 0);
  // A member of `g` (not rank 0): the generation rank 0 proposed after it.
  Generation follow(const Generation& g);
  // After `g` failed (a member died): this member is alive, with `step` steps trained. The
  // survivors say so in the store until none has come for `settle_s` (or all of g's have);
  // the first to get there publishes the next generation: the survivor with the most steps
  // first (its state goes on), the other survivors in their order, then the joiners waiting.
  // A survivor that came too late finds itself left out (rank -1): it may join again.
  Generation recover(const Generation& g, std::int64_t step, double settle_s);
  // The group of generation `g` (for its members): ranks meet in the store under g's keys.
  std::shared_ptr<Communicator> connect(const Generation& g, const CommOptions& options) const;
  // Says the job ended: joiners still waiting stop waiting.
  void finish();

 private:
  // Adds every joiner waiting since `admitted_before` to `next` (before its last
  // `keep_last` members) and publishes it as the newest generation; returns its record.
  std::string publish(Generation& next, std::int64_t admitted_before, int keep_last = 0);

  std::shared_ptr<StoreClient> store_;
  std::string host_, token_, id_;
  double timeout_s_;
};

}  // namespace weft::comm
