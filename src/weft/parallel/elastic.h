// Live resizing of a data-parallel training job (seed 003 chapter 11: adaptive data
// parallelism): the training side of comm/membership.h.
//
// After every step the ranks agree, in one small all-gather, whether the job changes: a rank
// was asked to leave (SIGTERM or SIGINT: it goes at the step boundary, not mid-step) or
// processes wait to join (rank 0 looks in the store, at most every 0.1 s) or the job's
// schedule wants another number of ranks (the last ones leave; for more, the launchers with
// spare places start them and they join). When it does,
// rank 0 gathers the run's state as a checkpoint image (hand_over: to the first rank that
// stays, when rank 0 itself leaves), the next generation's group is connected, and its rank
// 0 gives the image to every member (share_state), joiners included; each continues from it
// as from a checkpoint, on the new world. The global batch then stays (--elastic-batch
// fixed) or follows the world (linear: the rows per rank stay), with the learning rate as
// --scale-lr says.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weft/comm/membership.h"

namespace weft::parallel {

// What the ranks agreed at a step boundary: who leaves (ranks of the current group) and how
// many join.
struct MembershipChange {
  std::vector<int> leaving;
  std::int64_t joining = 0;
  bool failed = false;  // the ranks "leaving" died (recover)
};

class LiveMembership {
 public:
  // The job's live membership when weft launch --elastic or --join started this process
  // (WEFT_ELASTIC_STORE); none otherwise. Catches SIGTERM and SIGINT (a request to leave).
  static std::unique_ptr<LiveMembership> from_env(int launch_rank, int launch_world);
  static std::unique_ptr<LiveMembership> from_env();  // the launcher's rank and world (comm/process.h)
  // Whether this process is a live job's (WEFT_ELASTIC_STORE set), without joining it.
  static bool in_live_job();

  // The first generation this process belongs to: the launched ones' generation 0, or the
  // one that admits a joiner (WEFT_ELASTIC_JOIN=1); none when the job ended first.
  // `what`: the job's settings every member shares (a joiner that differs is refused).
  std::optional<comm::Generation> enter(const std::string& what);
  bool joined_late() const { return joiner_; }
  const comm::Generation& generation() const { return generation_; }
  // The current generation's group (connected once per generation).
  std::shared_ptr<comm::Communicator> connect(const comm::CommOptions& options);
  std::shared_ptr<comm::Communicator> connect() { return connect(comm::CommOptions::from_env()); }

  // Rank 0: the ranks the job should have from a step on (--grow-at STEP:WORLD,...), or
  // at once (a policy's decision); each applies once: to grow, the launchers with spare
  // places are asked for the processes missing; to shrink, the last ranks leave (before
  // those kept last). `why` says where it came from.
  void schedule(std::int64_t step, int world, std::string why);
  // Collective over `group` (the current generation's), after step `step`: the change due.
  std::optional<MembershipChange> poll(comm::Communicator& group, std::int64_t step);
  // Rank 0: what poll did that the log should say (a request for ranks), once.
  std::optional<std::string> take_note();
  // Whether this process was asked to leave.
  static bool leave_requested();
  // The generation after `change` (rank 0 publishes it, the others read it).
  const comm::Generation& advance(const MembershipChange& change);
  // The generation after a failure of the current one's group (a rank died), for a
  // survivor with `step` steps trained (comm::Membership::recover; one left out joins again);
  // none when the job ended meanwhile.
  std::optional<comm::Generation> recover(std::int64_t step);
  // Rank 0 at the job's end: joiners still waiting stop.
  void finish() { membership_.finish(); }
  // The last `n` members stay last in every generation (a parameter server's servers:
  // joiners come before them).
  void keep_last(int n) { keep_last_ = n; }

 private:
  LiveMembership(const std::string& address, const std::string& token, std::string id, bool joiner, int rank, int world);
  comm::Membership membership_;
  bool joiner_ = false;
  int launch_rank_ = 0, launch_world_ = 1;
  comm::Generation generation_;
  std::int64_t waiting_ = 0;
  int keep_last_ = 0;
  std::string what_;
  struct Target {
    std::int64_t step;
    int world;
    std::string why;
  };
  std::vector<Target> targets_;  // not yet applied, in order of step
  // Rank 0: processes asked of the launchers and not yet admitted, and since when (their
  // joiners are admitted together while they come within kGather seconds).
  std::int64_t expected_ = 0;
  std::chrono::steady_clock::time_point expected_since_{};
  std::optional<std::string> note_;
  std::chrono::steady_clock::time_point looked_{};
};

// Collective over the old group: `from` (which holds `bytes`) gives them to `to`; returns
// what `to` holds after (the others: empty).
std::string hand_over(comm::Communicator& group, std::string bytes, int from, int to);
// Collective over the new group: rank 0's `bytes` to every member.
std::string share_state(comm::Communicator& group, std::string bytes);

}  // namespace weft::parallel
